"""The RFC 8785 (JCS) work of one ACS ask, another checkout's code against this one's,
interleaved in one process (issue 16, sixth session).

The values are the ones an ask of the peers' scenario canonicalizes (captured from
``bench/warden_case.py``'s ``ScenarioWarden`` with this checkout): the request body,
the approval's action, the chain entry, the session's head record and the unsigned
response. ``base`` is that work as ``AcsService`` did it in ``--base-src``'s checkout
(its ``warden/crypto`` loaded under another package name): strict parse, ``jcs_route``
walk, signing input and ``request_hash`` params by that route, then the four other
values; ``now`` is the same work as this checkout's ``AcsService`` does it (the walk,
then one copy with the floats made ints for both request texts). The strict
parse is timed alone too, so the JCS part can be read apart from it. Both must give
the same bytes. Printed: µs per ask (best and median of ``--rounds`` rounds of
``--repeat`` × ``--number`` calls, interleaved), and the ratio of the bests.

With ``--count``, each case's instructions per ask are counted under callgrind instead
(runs valgrind twice; a load-free figure for the same work).

    PYTHONPATH=src python bench/jcs_ask.py --base-src ../wt-base/src
    PYTHONPATH=src python bench/jcs_ask.py --base-src ../wt-base/src --count
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import statistics
import subprocess
import sys
import tempfile
import timeit
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
_MODULES = ("ecmascript_number", "jcs_fast", "canonical")


def load_base(src: Path) -> tuple[Any, Any]:
    """``(canonical, jcs_fast)`` of ``src``'s ``warden.crypto``, as package ``basejcs``."""
    pkg = Path(tempfile.mkdtemp(prefix="warden-jcs-base-")) / "basejcs"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    for name in _MODULES:
        text = (src / "warden" / "crypto" / f"{name}.py").read_text()
        text = re.sub(r"\bwarden\.crypto\.(" + "|".join(_MODULES) + r")\b", r"basejcs.\1", text)
        (pkg / f"{name}.py").write_text(text)
    sys.path.insert(0, str(pkg.parent))
    return importlib.import_module("basejcs.canonical"), importlib.import_module("basejcs.jcs_fast")


def capture() -> tuple[bytes, list[Any]]:
    """A request body of the scenario and the other values its ask canonicalizes."""
    sys.path.insert(0, str(HERE))
    from scenario_bundle import BUNDLE_PATH, DEFAULT_PEERS_DIR, load_scenario
    from warden_case import ScenarioWarden

    import warden.approvals.binding as binding
    import warden.ledger.chain as chain
    import warden.ledger.ledger as ledger
    import warden.wire.acs.signing as signing
    from warden.crypto import canonical

    scenario = load_scenario(DEFAULT_PEERS_DIR)
    warden = ScenarioWarden(Path(tempfile.mkdtemp(prefix="warden-jcs-ask-")), BUNDLE_PATH)
    bodies = warden.bodies(scenario.REQUEST, 12)
    for body in bodies[:10]:
        warden.handle(body)
    seen: list[Any] = []
    real = canonical.canonical_bytes

    def spy(value: Any, **kw: Any) -> bytes:
        seen.append(value)
        return real(value, **kw)

    modules = (binding, chain, ledger, signing)
    for module in modules:
        module.canonical_bytes = spy  # type: ignore[attr-defined]
    try:
        warden.handle(bodies[10])
    finally:
        for module in modules:
            module.canonical_bytes = real  # type: ignore[attr-defined]
        warden.close()
    # The action, the entry content, the head record, the unsigned response; the
    # request's own texts (an envelope with params) are made by each case from the body.
    others = [v for v in seen if not ("jsonrpc" in v and "params" in v)]
    if len(others) != 4:
        raise SystemExit(f"expected the 4 values an ask canonicalizes, saw {len(others)}")
    return bodies[11], others


def cases(base_src: Path) -> dict[str, Callable[[], object]]:
    from warden.crypto import canonical as now_c
    from warden.crypto.jcs_fast import jcs_route, jcs_writable
    from warden.wire.acs.signing import request_signing_input

    base_c, base_f = load_base(base_src)
    body, others = capture()

    def base() -> object:
        msg = base_c.parse_strict_json(body, max_depth=128)
        route = base_f.jcs_route(msg)
        unsigned = {k: v for k, v in msg["params"].items() if k != "signature"}
        texts = [
            base_c.canonical_bytes({**msg, "params": unsigned}, within=route),
            base_c.canonical_bytes(msg["params"], within=route),
        ]
        return texts + [base_c.canonical_bytes(v) for v in others]

    def now() -> object:
        msg = now_c.parse_strict_json(body, max_depth=128)
        ready, route = jcs_writable(msg, jcs_route(msg))
        texts = [
            request_signing_input(ready, within=route),
            now_c.canonical_bytes(ready["params"], within=route),
        ]
        return texts + [now_c.canonical_bytes(v) for v in others]

    def parse() -> object:
        return base_c.parse_strict_json(body, max_depth=128)

    if base() != now():
        raise SystemExit("the two checkouts write different bytes")
    return {"base": base, "now": now, "parse": parse}


def count(base_src: Path, calls: int) -> None:
    """Instructions per call of each case, under callgrind."""
    for name in ("base", "now", "parse"):
        out = Path(tempfile.mkdtemp(prefix="warden-jcs-cg-")) / "cg.out"
        subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                "--instr-atstart=no",
                f"--callgrind-out-file={out}",
                sys.executable,
                __file__,
                "--base-src",
                str(base_src),
                "--child",
                name,
                "--number",
                str(calls),
            ],
            check=True,
            capture_output=True,
            env={**os.environ, "PYTHONHASHSEED": "0"},
        )
        match = re.search(r"^totals:\s+(\d+)", out.read_text(), re.M)
        assert match is not None
        print(f"{name:6} {int(match.group(1)) // calls:>10,} instructions per call")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base-src", type=Path, required=True)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--number", type=int, default=2000)
    ap.add_argument("--count", action="store_true")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ns = ap.parse_args()
    if ns.count:
        count(ns.base_src, ns.number // 2)
        return
    todo = cases(ns.base_src)
    if ns.child:
        call = todo[ns.child]
        for _ in range(200):
            call()
        pid = str(os.getpid())
        subprocess.run(["callgrind_control", "-i", "on", pid], check=True, capture_output=True)
        for _ in range(ns.number):
            call()
        subprocess.run(["callgrind_control", "-i", "off", pid], check=True, capture_output=True)
        return
    best: dict[str, list[float]] = {name: [] for name in todo}
    for _ in range(ns.rounds):
        for name, call in todo.items():
            runs = timeit.repeat(call, number=ns.number, repeat=ns.repeat)
            best[name].append(min(runs) / ns.number * 1e6)
    for name, per in best.items():
        print(f"{name:6} best {min(per):7.2f} µs   median {statistics.median(per):7.2f} µs")
    b, n, p = min(best["base"]), min(best["now"]), min(best["parse"])
    print(f"now ÷ base: {n / b:.3f}; without the parse: {b - p:.2f} → {n - p:.2f} µs")


if __name__ == "__main__":
    main()
