// Sandbox runner benchmark: p50/p99 of create, exec `true`, exec with 1 MB
// input, destroy of 1 MB and 64 MB capsules, beside a bare `bwrap ... true`
// measured in the same run; then 50 live capsules and host memory per idle
// capsule. Prints figures; run as root: npm run build && npm run bench:runner
// BENCH_RUNS (default 200) sets the run count of every series.
import { readFileSync, statfsSync } from 'node:fs';
import { createConnection } from 'node:net';
import { encodeFrame, FRAME_PREFIX_BYTES } from '../shared/node/framing.js';
import { startRunner } from '../test/helpers/runner.js';
import { BARE, runProc } from './bare-bwrap.js';

const RUNS = Number(process.env['BENCH_RUNS'] ?? 200);
const MiB = 1024 * 1024;

interface Series {
  name: string;
  ms: number[];
}

function pct(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]!;
}

function row(s: Series): string {
  const v = [...s.ms].sort((a, b) => a - b);
  const mean = v.reduce((a, b) => a + b, 0) / v.length;
  return `${s.name.padEnd(34)} n=${String(v.length).padEnd(4)} p50=${pct(v, 50).toFixed(2).padStart(8)} ms  p99=${pct(v, 99).toFixed(2).padStart(8)} ms  mean=${mean.toFixed(2).padStart(8)} ms`;
}

async function time<T>(fn: () => Promise<T>): Promise<number> {
  const t0 = performance.now();
  await fn();
  return performance.now() - t0;
}

function meminfo(): Record<string, number> {
  const out: Record<string, number> = {};
  for (const l of readFileSync('/proc/meminfo', 'utf8').split('\n')) {
    const m = /^(\w+):\s+(\d+)/.exec(l);
    if (m) out[m[1]!] = Number(m[2]) * 1024;
  }
  return out;
}

/** Private (unshared) memory of a process, from smaps_rollup. */
function privateBytes(pid: number): number {
  try {
    const t = readFileSync(`/proc/${pid}/smaps_rollup`, 'utf8');
    const kb = (k: string): number => Number(new RegExp(`^${k}:\\s+(\\d+)`, 'm').exec(t)?.[1] ?? 0);
    return (kb('Private_Clean') + kb('Private_Dirty')) * 1024;
  } catch {
    return 0;
  }
}

function rss(pid: number): number {
  const m = /VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) * 1024 : 0;
}

const FLOOD_COMMAND =
  'python3 -c "import sys; sys.stdout.write(chr(1) * (1 << 20)); sys.stderr.buffer.write(bytes([255]) * (1 << 20))"';

/** Runs FLOOD_COMMAND in a loop on a connection of its own until stop.now; answers are skipped, not parsed. */
async function floodAnswers(socketPath: string, id: string, stop: { now: boolean }): Promise<number> {
  const sock = createConnection(socketPath);
  await new Promise<void>((res, rej) => sock.once('connect', res).once('error', rej));
  let answered = 0;
  let prefix = Buffer.alloc(0);
  let skip = 0;
  let done: () => void = () => undefined;
  sock.on('data', (b: Buffer) => {
    while (b.length > 0) {
      if (skip > 0) {
        const n = Math.min(skip, b.length);
        skip -= n;
        b = b.subarray(n);
        if (skip === 0) done();
        continue;
      }
      const need = FRAME_PREFIX_BYTES - prefix.length;
      prefix = Buffer.concat([prefix, b.subarray(0, need)]);
      b = b.subarray(need);
      if (prefix.length === FRAME_PREFIX_BYTES) {
        skip = prefix.readUInt32BE(0) + prefix.readUInt32BE(4);
        prefix = Buffer.alloc(0);
        if (skip === 0) done();
      }
    }
  });
  for (let n = 1; !stop.now; n++) {
    const answer = new Promise<void>((res) => (done = res));
    const params = { capsule_id: id, command: FLOOD_COMMAND, timeout_ms: 30_000, output_in_body: true };
    sock.write(encodeFrame({ id: n, method: 'exec', params }, null));
    await answer;
    answered++;
  }
  sock.destroy();
  return answered;
}

async function main(): Promise<void> {
  const r = await startRunner({
    options: { max_input_bytes: String(2 * MiB), tmpfs_mb: '128', max_capsules: '512' },
    uidCount: 1024,
  });
  const c = r.client;
  const series: Series[] = [];
  const add = (name: string): Series => {
    const s = { name, ms: [] as number[] };
    series.push(s);
    return s;
  };
  try {
    const bareRoot = add('bare bwrap true (root)');
    const bareUser = add('bare setpriv+bwrap true (uid)');
    for (let i = 0; i < 10; i++) await runProc('bwrap', BARE);
    for (let i = 0; i < RUNS; i++) {
      bareRoot.ms.push(await time(() => runProc('bwrap', BARE)));
      bareUser.ms.push(
        await time(() => runProc('setpriv', ['--reuid=65534', '--regid=65534', '--clear-groups', 'bwrap', ...BARE])),
      );
    }

    const create = add('create');
    const destroyEmpty = add('destroy (empty, after one exec)');
    for (let i = 0; i < RUNS; i++) {
      const id = `b-create-${i}`;
      create.ms.push(await time(() => c.create({ capsule_id: id, memory_mb: 128 })));
      await c.exec({ capsule_id: id, command: 'true', timeout_ms: 10000 });
      destroyEmpty.ms.push(await time(() => c.destroy(id)));
    }

    await c.create({ capsule_id: 'b-exec', memory_mb: 128 });
    for (let i = 0; i < 10; i++) await c.exec({ capsule_id: 'b-exec', command: 'true', timeout_ms: 10000 });
    const execTrue = add('exec true');
    for (let i = 0; i < RUNS; i++)
      execTrue.ms.push(await time(() => c.exec({ capsule_id: 'b-exec', command: 'true', timeout_ms: 10000 })));
    const input = Buffer.alloc(MiB, 0x61).toString('base64');
    const execInput = add('exec with 1 MB input (wc -c)');
    for (let i = 0; i < RUNS; i++) {
      execInput.ms.push(
        await time(async () => {
          const res = await c.exec({
            capsule_id: 'b-exec',
            command: 'wc -c < /data/input/data',
            input_b64: input,
            timeout_ms: 10000,
          });
          if (res.stdout.trim() !== String(MiB)) throw new Error(`input not seen: ${res.stdout} ${res.stderr}`);
        }),
      );
    }
    await c.destroy('b-exec');

    // The runner's serving loop while other tenants print megabytes: hello (answered on the serving
    // thread) idle, then beside four capsules each printing 1 MiB of \x01 and 1 MiB of invalid UTF-8
    // in a loop. The floods' answers are read and dropped unparsed (floodAnswers), so that this
    // process's own decoding does not count as the runner's.
    const helloIdle = add('hello (idle)');
    for (let i = 0; i < RUNS; i++) helloIdle.ms.push(await time(() => c.hello()));
    const helloFlood = add('hello beside 4 output floods');
    const floods = ['b-flood-0', 'b-flood-1', 'b-flood-2', 'b-flood-3'];
    for (const id of floods) await c.create({ capsule_id: id, memory_mb: 128 });
    const stop = { now: false };
    const flooding = floods.map((id) => floodAnswers(r.socketPath, id, stop));
    await new Promise((res) => setTimeout(res, 1000));
    for (let i = 0; i < RUNS; i++) {
      helloFlood.ms.push(await time(() => c.hello()));
      await new Promise((res) => setTimeout(res, 10));
    }
    stop.now = true;
    const answered = (await Promise.all(flooding)).reduce((a, b) => a + b, 0);
    for (const id of floods) await c.destroy(id);
    console.log(`(output floods answered meanwhile: ${answered})`);

    const d1 = add('destroy holding 1 MB');
    const oneMb = Buffer.alloc(MiB, 0x62);
    for (let i = 0; i < RUNS; i++) {
      const id = `b-d1-${i}`;
      await c.create({ capsule_id: id, memory_mb: 128 });
      await c.upload(id, 'one.bin', Buffer.from(oneMb));
      await c.exec({ capsule_id: id, command: 'true', timeout_ms: 10000 });
      d1.ms.push(await time(() => c.destroy(id)));
    }

    const d64 = add('destroy holding 64 MB');
    for (let i = 0; i < RUNS; i++) {
      const id = `b-d64-${i}`;
      await c.create({ capsule_id: id, memory_mb: 256 });
      const w = await c.exec({
        capsule_id: id,
        command: 'head -c 67108864 /dev/zero | tr "\\0" x > /data/output/big',
        timeout_ms: 60000,
      });
      if (w.exit_code !== 0) throw new Error(`64 MB write failed: ${w.stderr}`);
      const d = await time(async () => {
        const res = await c.destroy(id);
        if (res.wipe.bytes_overwritten < 64 * MiB) throw new Error('wipe did not cover 64 MB');
      });
      d64.ms.push(d);
    }

    // 50 live idle capsules (each has run one exec), host memory each costs.
    const before = meminfo();
    const rssBefore = rss(r.process.pid!);
    const live = add('create x50 live (each)');
    for (let i = 0; i < 50; i++) {
      const id = `b-live-${i}`;
      live.ms.push(await time(() => c.create({ capsule_id: id, memory_mb: 64 })));
      await c.exec({ capsule_id: id, command: 'true', timeout_ms: 10000 });
    }
    await new Promise((res) => setTimeout(res, 500));
    const after = meminfo();
    const rssAfter = rss(r.process.pid!);
    const perCapsule = (before['MemAvailable']! - after['MemAvailable']!) / 50 / MiB;
    // What each idle capsule holds, measured per capsule: its memory cgroup's charge (tmpfs pages,
    // kernel objects charged to it) and the bytes used on its tmpfs.
    let cgroupBytes = 0;
    let tmpfsBytes = 0;
    let procs = 0;
    let procRss = 0;
    for (let i = 0; i < 50; i++) {
      const rec = JSON.parse(readFileSync(`${r.stateDir}/capsules/b-live-${i}.json`, 'utf8')) as {
        cgroup: { mode: string; memory: string };
        tmpfs_dir: string;
      };
      const file = rec.cgroup.mode === 'v2' ? 'memory.current' : 'memory.usage_in_bytes';
      cgroupBytes += Number(readFileSync(`${rec.cgroup.memory}/${file}`, 'utf8'));
      const st = statfsSync(rec.tmpfs_dir);
      tmpfsBytes += (st.blocks - st.bfree) * st.bsize;
      // The waiting wrapper of the next exec (one small root sh per capsule).
      for (const pid of readFileSync(`${rec.cgroup.memory}/cgroup.procs`, 'utf8').split('\n').filter(Boolean)) {
        procs++;
        procRss += privateBytes(Number(pid));
      }
    }
    const execAmong = add('exec true with 50 live capsules');
    for (let i = 0; i < Math.min(RUNS, 200); i++)
      execAmong.ms.push(
        await time(() => c.exec({ capsule_id: `b-live-${i % 50}`, command: 'true', timeout_ms: 10000 })),
      );
    for (let i = 0; i < 50; i++) await c.destroy(`b-live-${i}`);

    console.log(`sandbox runner benchmark, ${RUNS} runs per series, ${new Date().toISOString()}`);
    console.log(`load average at end: ${readFileSync('/proc/loadavg', 'utf8').trim()}`);
    for (const s of series) console.log(row(s));
    const p50 = (s: Series): number =>
      pct(
        [...s.ms].sort((a, b) => a - b),
        50,
      );
    console.log(
      `exec true p50 / bare root bwrap p50 = ${(p50(execTrue) / p50(bareRoot)).toFixed(2)}x; / bare setpriv+bwrap p50 = ${(p50(execTrue) / p50(bareUser)).toFixed(2)}x`,
    );
    console.log(
      `per idle capsule (measured over 50): memory cgroup charge ${(cgroupBytes / 50 / 1024).toFixed(0)} KiB, tmpfs used ${(tmpfsBytes / 50 / 1024).toFixed(0)} KiB, runner RSS ${((rssAfter - rssBefore) / 50 / 1024).toFixed(0)} KiB, processes ${(procs / 50).toFixed(1)} (private memory ${(procRss / Math.max(procs, 1) / 1024).toFixed(0)} KiB each)`,
    );
    console.log(
      `50 idle capsules: host MemAvailable drop ${((before['MemAvailable']! - after['MemAvailable']!) / MiB).toFixed(1)} MiB (${perCapsule.toFixed(2)} MiB each, noisy: shared machine); runner RSS +${((rssAfter - rssBefore) / MiB).toFixed(1)} MiB; Shmem +${((after['Shmem']! - before['Shmem']!) / MiB).toFixed(2)} MiB`,
    );
  } finally {
    await r.stop();
  }
}

main().catch((e: unknown) => {
  console.error(e);
  process.exit(1);
});
