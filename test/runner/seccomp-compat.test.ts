// Everyday programs run in a real capsule under the shipped allowlist: bash
// (job control needs getpgrp), python asyncio (epoll_wait), ulimit and
// resource limits (prlimit64), df and disk usage (statfs), id (getgroups),
// load average (sysinfo), CPU affinity, faulthandler (sigaltstack), and a
// handful of CPython's own regression modules through CPython's test runner
// (the short form of `npm run compat:cpython`).
import t, { type Test } from 'tap';
import { existsSync } from 'node:fs';
import type { ExecResult } from '../../shared/runner-protocol.js';
import { startRunner } from '../helpers/runner.js';

const PY = '/usr/bin/python3';
const py = (code: string): string => `${PY} - <<'PYEOF'\n${code}\nPYEOF`;

t.test('everyday programs run in a capsule', async (t) => {
  const r = await startRunner();
  t.teardown(() => r.stop());
  await r.client.create({ capsule_id: 'compat', memory_mb: 256 });
  const run = (command: string, timeout_ms = 30000): Promise<ExecResult> =>
    r.client.exec({ capsule_id: 'compat', command, timeout_ms });
  const ok = (t: Test, res: ExecResult, what: string): void => {
    t.equal(res.exit_code, 0, `${what} exits 0 (stderr: ${res.stderr.slice(0, 300)})`);
  };

  await t.test('bash', async (t) => {
    const res = await run(`bash -c 'echo hi'`);
    ok(t, res, 'bash -c');
    t.equal(res.stdout, 'hi\n');
    t.equal(res.stderr, '', 'no job-control complaint');
    const script = await run(
      `bash -c 'set -e; f() { echo "$1$1"; }; x=$(f ab | tr a-z A-Z); echo "$x" $$ $PPID >/dev/null; echo "$x"'`,
    );
    ok(t, script, 'a bash script with a pipeline and a subshell');
    t.equal(script.stdout, 'ABAB\n');
  });

  await t.test('ulimit and resource limits', async (t) => {
    const res = await run(`bash -c 'ulimit -a; echo; ulimit -n'`);
    ok(t, res, 'ulimit -a');
    t.match(res.stdout, /open files\s+\(-n\) \d+/, 'ulimit -a prints the limits');
    const n = res.stdout.trim().split('\n').pop();
    const p = await run(py('import resource; print(resource.getrlimit(resource.RLIMIT_NOFILE)[0])'));
    ok(t, p, 'resource.getrlimit');
    t.equal(p.stdout.trim(), n, 'python and bash see the same limit');
    const lower = await run(
      py(
        'import resource; resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64)); print(resource.getrlimit(resource.RLIMIT_NOFILE))',
      ),
    );
    t.equal(lower.stdout.trim(), '(64, 64)', 'lowering an own limit works');
    const raise = await run(
      py(
        'import resource\ntry:\n  resource.setrlimit(resource.RLIMIT_NOFILE, (1 << 30, 1 << 30)); print("RAISED")\nexcept (ValueError, OSError) as e: print("refused", type(e).__name__)',
      ),
    );
    t.match(raise.stdout, /^refused/, 'raising a hard limit beyond the host maximum is refused by the kernel');
  });

  await t.test('df, disk usage and statfs', async (t) => {
    const df = await run('df -P /tmp /data/output');
    ok(t, df, 'df');
    t.match(df.stdout, /^capsule-tmpfs\s+\d+\s+\d+\s+\d+\s+\d+%\s+\/tmp$/m, 'df shows the capsule tmpfs');
    const du = await run(py('import shutil; u = shutil.disk_usage("/tmp"); print(u.total > 0, u.free <= u.total)'));
    ok(t, du, 'shutil.disk_usage');
    t.equal(du.stdout.trim(), 'True True');
    const node = await run(`node -e 'const s = require("fs").statfsSync("/tmp"); console.log(s.blocks > 0)'`);
    ok(t, node, 'node fs.statfsSync');
    t.equal(node.stdout.trim(), 'true');
  });

  await t.test('id, load average, CPU affinity, process groups', async (t) => {
    const id = await run('id');
    ok(t, id, 'id');
    t.match(id.stdout, /^uid=1000\(capsule\) gid=1000\(capsule\) groups=/);
    const info = await run(
      py(
        'import os\nprint(len(os.sched_getaffinity(0)) >= 1, len(os.getloadavg()), os.getpgrp() > 0, os.getgroups() is not None)',
      ),
    );
    ok(t, info, 'sched_getaffinity, getloadavg, getpgrp, getgroups');
    t.equal(info.stdout.trim(), 'True 3 True True');
  });

  await t.test('python asyncio and faulthandler', async (t) => {
    const res = await run(
      py(`import asyncio, faulthandler, sys
faulthandler.enable()
async def echo(reader, writer):
    writer.write(await reader.readline()); await writer.drain(); writer.close()
async def main():
    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"ping\\n"); await writer.drain()
    line = await reader.readline()
    proc = await asyncio.create_subprocess_exec("echo", "sub", stdout=asyncio.subprocess.PIPE)
    out, _ = await proc.communicate()
    server.close(); await server.wait_closed()
    return line.decode().strip() + " " + out.decode().strip()
print(asyncio.run(main()), faulthandler.is_enabled())`),
    );
    ok(t, res, 'asyncio.run');
    t.equal(res.stdout.trim(), 'ping sub True');
  });

  await t.test("CPython's own regression modules, through its test runner", async (t) => {
    if (!existsSync('/usr/lib/python3.11/test/test_resource.py'))
      t.fail('libpython3.11-testsuite is not installed (./run installs it)');
    const modules = [
      'test_resource',
      'test_fcntl',
      'test_select',
      'test_epoll',
      'test_pwd',
      'test_stat',
      'test_threadsignals',
    ];
    const res = await run(`cd /tmp && ${PY} -m test ${modules.join(' ')} 2>&1 | tail -c 3000`, 180000);
    t.match(res.stdout, /Tests result: SUCCESS/, `regrtest: ${res.stdout.slice(-1500)}`);
    t.match(res.stdout, new RegExp(`All ${modules.length} tests OK`));
  });
});
