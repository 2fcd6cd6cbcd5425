// Tests of features confirmed NOT implemented yet. run.sh does not run this file by default
// (`run.sh --all` does); each test here must fail today and pass once the feature lands, after
// which it moves to the default files.
//
// Currently empty: everything the suite covers works. (History: WebSocket pass-through through
// the proxy route lived here until execd's /proxy learned to splice upgrades; it is now in
// ports.test.mjs.)
import { test } from "node:test";

test("no pending features", () => {});
