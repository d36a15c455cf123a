// Loaded by scripts/adcp-compliance into the runner (`--invariants <this file>`) for the
// derived delivery-monitor run only. It corrects one thing in @adcp/sdk 6.11.0's request
// builder and nothing else:
//
// For check_governance the runner merges its own defaults under the storyboard's
// sample_request ("fixture wins, enricher fills gaps"), and its defaults include a
// `payload` ({type: "media_buy", account, brand, total_budget: 10000}). A delivery-phase
// check (sample_request carries `governance_context`, no `payload`) then goes out with a
// payload the storyboard never wrote, and AdCP 3.2's check-governance-request.json forbids
// `payload` next to `governance_context` (and requires `tool` + `target_agent` with it), so a
// conforming agent must reject the request. Here the injected payload is dropped when the
// step's own sample_request has none but does carry governance_context; every other request
// is built exactly as the runner builds it.
'use strict';

const fs = require('fs');
const path = require('path');

// The runner's own copy of the module (the CLI's real path), so the patch reaches the
// instance runner.js calls through `request_builder_1.enrichRequest(...)`.
const cli = fs.realpathSync(process.argv[1]);
const builderPath = path.resolve(path.dirname(cli), '..', 'dist', 'lib', 'testing', 'storyboard', 'request-builder.js');
const builder = require(builderPath);
const original = builder.enrichRequest;

builder.enrichRequest = function enrichRequestWithoutInjectedPayload(step, context, options, runnerVars) {
  const request = original(step, context, options, runnerVars);
  const fixture = step && step.sample_request;
  if (
    step.task === 'check_governance' &&
    fixture &&
    !Object.prototype.hasOwnProperty.call(fixture, 'payload') &&
    Object.prototype.hasOwnProperty.call(fixture, 'governance_context') &&
    request &&
    typeof request === 'object'
  ) {
    const { payload: _injected, ...rest } = request;
    return rest;
  }
  return request;
};
