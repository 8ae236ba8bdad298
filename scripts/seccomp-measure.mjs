// Measures which allowlist entries the workload corpus needs, in real capsules:
//   npm run build && node scripts/seccomp-measure.mjs   (as root)
// Starts one runner, then for each allowed entry in file order rewrites the
// runner's compiled program with that entry refused (cumulatively: entries
// already found unneeded stay refused) and re-runs the whole corpus
// (test/runner/workloads). Refused with the default errno first; if that
// breaks a workload, with ENOSYS (runtimes' fallback signal); for *xattr
// calls also EOPNOTSUPP ("no xattr support"). Prints what each entry needs.
// The allowlist is now anchored on Docker's default profile: what this finds
// unused by the corpus is not by itself a reason to remove an entry (see the
// policy file's header); npm run compat:cpython measures the wider effect.
import { writeFileSync } from 'node:fs';
const { startRunner } = await import('../dist/test/helpers/runner.js');
const { runCorpus, startEgressFixture } = await import('../dist/test/runner/workloads/corpus.js');
const { compilePolicy, loadPolicy } = await import('../dist/sandbox-runner/seccomp.js');

const policy = loadPolicy(new URL('../policies/seccomp-allowlist.yaml', import.meta.url).pathname);
const fx = await startEgressFixture();
const r = await startRunner();
const bpf = `${r.stateDir}/seccomp.bpf`;
process.once('SIGTERM', () => {
  fx.close();
  void r.stop().then(() => process.exit(143));
});
const ids = { plain: 'plain', egress: 'egress' };
await r.client.create({ capsule_id: 'plain', memory_mb: 256 });
await r.client.create({
  capsule_id: 'egress',
  memory_mb: 256,
  egress: { proxy_socket: fx.proxySocket, ca_pem: fx.caPem },
});

// Overwrites the program in place: the runner opens it per exec.
const trial = async (syscalls) => {
  writeFileSync(bpf, compilePolicy({ ...policy, syscalls }));
  return runCorpus(r.client, ids, fx.httpsPort, 20000);
};
const failing = (res) => res.filter((x) => !x.ok);
const brief = (fails) =>
  fails
    .map((f) =>
      `${f.name}: ${
        f.detail
          .split('\n')
          .filter((l) => l && !l.startsWith('---'))
          .slice(-1)[0] ?? ''
      }`.slice(0, 160),
    )
    .join(' | ');

let current = policy.syscalls.map((s) => ({ ...s }));
const base = failing(await trial(current));
if (base.length) {
  console.log(`baseline fails: ${brief(base)}`);
  await r.stop();
  fx.close();
  process.exit(1);
}
const report = [];
for (const entry of policy.syscalls.filter((s) => !s.errno)) {
  let verdict = 'needed';
  let why = '';
  for (const errno of ['drop', 'ENOSYS', ...(entry.name.includes('xattr') ? ['EOPNOTSUPP'] : [])]) {
    const next =
      errno === 'drop'
        ? current.filter((s) => s.name !== entry.name)
        : current.map((s) => (s.name === entry.name ? { ...s, errno } : s));
    const fails = failing(await trial(next));
    if (!fails.length) {
      current = next;
      verdict = errno === 'drop' ? 'unneeded' : `refuse ${errno}`;
      break;
    }
    if (errno === 'drop') why = brief(fails);
  }
  report.push({ name: entry.name, verdict, why });
  console.log(`${entry.name.padEnd(18)} ${verdict.padEnd(17)} ${verdict === 'needed' ? why : ''}`);
}
const finalFails = failing(await trial(current));
console.log(
  `\nfinal: ${current.filter((s) => !s.errno).length} allowed, ${current.filter((s) => s.errno).length} refused with an errno; corpus ${finalFails.length ? `FAILS: ${brief(finalFails)}` : 'passes'}`,
);
writeFileSync('/tmp/seccomp-measure.json', JSON.stringify(report, null, 1));
await r.stop();
fx.close();
