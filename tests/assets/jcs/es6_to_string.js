// Reads big-endian IEEE-754 hex lines on stdin; writes "hex,Number.prototype.toString".
const lines = require('fs').readFileSync(0, 'utf8').trim().split('\n');
const view = new DataView(new ArrayBuffer(8));
const out = lines.map((hex) => {
  view.setBigUint64(0, BigInt('0x' + hex));
  return hex + ',' + view.getFloat64(0).toString();
});
process.stdout.write(out.join('\n') + '\n');
