// The egress policy through the stock SDK: Sandbox.create with networkPolicy, and the three egress
// methods (getEgressPolicy, patchEgressRules, deleteEgressRules), which talk to port 18080 of the
// sandbox through corrald's proxy route with the headers of its endpoint reply. run.sh starts
// corrald with a private "internet" (tests/integration/netlab.py) and exports its addresses.
import assert from "node:assert/strict";
import { test } from "node:test";

import { createSandbox, destroy, sh } from "./lib.mjs";

const LAB = process.env.CORRAL_COMPAT_LAB_ALLOWED_TEST;

async function lookup(sbx, name) {
  // getent exits 2 for a name that does not exist
  const ex = await sbx.commands.run(`getent ahostsv4 ${name} | awk '{print $1; exit}'; exit 0`);
  return ex.logs.stdout.map((m) => m.text.trim()).filter(Boolean)[0] || "NXDOMAIN";
}

test("networkPolicy at create, getEgressPolicy, patchEgressRules, deleteEgressRules", { skip: !LAB && "run.sh started no network lab" }, async () => {
  const sbx = await createSandbox({
    metadata: { case: "egress" },
    networkPolicy: { defaultAction: "deny", egress: [{ action: "allow", target: "allowed.test" }] },
  });
  try {
    assert.deepEqual(await sbx.getEgressPolicy(), {
      defaultAction: "deny",
      egress: [{ action: "allow", target: "allowed.test" }],
    });
    assert.equal(await lookup(sbx, "allowed.test"), LAB);
    assert.equal(await lookup(sbx, "denied.test"), "NXDOMAIN");

    await sbx.patchEgressRules([{ action: "allow", target: "denied.test" }]);
    assert.deepEqual((await sbx.getEgressPolicy()).egress, [
      { action: "allow", target: "denied.test" },
      { action: "allow", target: "allowed.test" },
    ]);
    assert.equal(await lookup(sbx, "denied.test"), process.env.CORRAL_COMPAT_LAB_DENIED_TEST);

    await sbx.deleteEgressRules(["allowed.test"]);
    assert.deepEqual((await sbx.getEgressPolicy()).egress, [{ action: "allow", target: "denied.test" }]);
    assert.equal(await lookup(sbx, "allowed.test"), "NXDOMAIN");
    // the body of an HTTP server that exists only in the lab, by name
    const out = await sh(sbx, "curl -s --max-time 3 http://denied.test/");
    assert.deepEqual(out, [`hello from ${process.env.CORRAL_COMPAT_LAB_DENIED_TEST}`]);
  } finally {
    await destroy(sbx);
  }
});

test("the SDK's default networkPolicy (defaultAction deny when omitted) is enforced", { skip: !LAB && "run.sh started no network lab" }, async () => {
  const sbx = await createSandbox({
    metadata: { case: "egress-default" },
    networkPolicy: { egress: [{ action: "allow", target: "*.wild.test" }] },
  });
  try {
    const pol = await sbx.getEgressPolicy();
    assert.equal(pol.defaultAction, "deny");
    assert.equal(await lookup(sbx, "a.b.wild.test"), process.env.CORRAL_COMPAT_LAB_A_B_WILD_TEST);
    assert.equal(await lookup(sbx, "wild.test"), "NXDOMAIN");
  } finally {
    await destroy(sbx);
  }
});
