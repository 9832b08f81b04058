// The IAM evaluator for request paths (tests/iam, the preview diff):
// @cloud-copilot/iam-simulate, run over every request path at once. Reads a JSON array of {id, simulation} on stdin; writes a JSON array of
// {id, result, errors} on stdout, `result` being Allowed, ExplicitlyDenied or
// ImplicitlyDenied as the simulator decides.
//
// runSimulation checks each request (action, resource, principal) and drops the context
// keys AWS would not send with that action, which catches a mistyped key in the table.
// It recognises keys with a variable part only in the `prefix/name` form (aws:PrincipalTag/x),
// so it also drops KMS's `kms:EncryptionContext:<key>` although KMS sends it. Where that is
// all it dropped, the request is decided again by runUnsafeSimulation (the same engine,
// without that filter) with the context as the table gives it. runUnsafeSimulation needs
// the resource policy named, so it gets one already loaded.
import { createValidatedPolicy, validateResourcePolicy } from "@cloud-copilot/iam-policy";
import { runSimulation, runUnsafeSimulation } from "@cloud-copilot/iam-simulate";

const ENCRYPTION_CONTEXT = "kms:encryptioncontext:";

const chunks = [];
for await (const chunk of process.stdin) chunks.push(chunk);
const paths = JSON.parse(Buffer.concat(chunks).toString("utf8"));
const answers = [];
for (const { id, simulation } of paths) {
  const outcome = await runSimulation(simulation, { simulationMode: "Strict" });
  if (outcome.resultType === "error") {
    answers.push({ id, result: "Error", errors: outcome.errors });
    continue;
  }
  if (outcome.resultType !== "single") {
    // A path names one resource; a wildcard answer means the table named none.
    answers.push({ id, result: "Error", errors: { resultType: outcome.resultType } });
    continue;
  }
  const ignored = outcome.result.ignoredContextKeys ?? [];
  const unknown = ignored.filter((key) => !key.toLowerCase().startsWith(ENCRYPTION_CONTEXT));
  if (unknown.length > 0) {
    answers.push({ id, result: "Error", errors: { ignoredContextKeys: unknown } });
  } else if (ignored.length > 0) {
    const resourcePolicy = simulation.resourcePolicy &&
      createValidatedPolicy(simulation.resourcePolicy, validateResourcePolicy, { name: "resource-policy" });
    answers.push({ id, result: runUnsafeSimulation({ ...simulation, resourcePolicy }, {}) });
  } else {
    answers.push({ id, result: outcome.overallResult });
  }
}
process.stdout.write(JSON.stringify(answers));
