// favordynmods: the runner finds the cgroup2 mount, sets the flag once at
// start (so moving an exec's wrapper into its cgroups does not wait for an
// RCU grace period), leaves a mount that has it alone, and can be told not to.
import t from 'tap';
import { readFileSync } from 'node:fs';
import { cgroup2Mount, favorDynmods } from '../../sandbox-runner/cgroup-dynmods.js';
import { loadConfig } from '../../sandbox-runner/config.js';
import { startRunner } from '../helpers/runner.js';

const HYBRID = [
  '31 25 0:27 / /sys/fs/cgroup rw,nosuid - tmpfs tmpfs rw,mode=755',
  '35 31 0:31 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory',
  '41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw',
].join('\n');

t.test('finds the cgroup2 mount and reads the flag from its super options', async (t) => {
  t.same(cgroup2Mount(HYBRID), { mountPoint: '/sys/fs/cgroup/unified', favored: false });
  t.same(cgroup2Mount(HYBRID.replace('cgroup2 rw', 'cgroup2 rw,nsdelegate,favordynmods')), {
    mountPoint: '/sys/fs/cgroup/unified',
    favored: true,
  });
  // A per-mount option of the same name is not the hierarchy's flag.
  t.same(cgroup2Mount('41 31 0:38 / /sys/fs/cgroup rw,favordynmods - cgroup2 cgroup2 rw'), {
    mountPoint: '/sys/fs/cgroup',
    favored: false,
  });
  t.same(cgroup2Mount('40 31 0:38 / /c\\040g rw - cgroup2 cgroup2 rw'), { mountPoint: '/c g', favored: false });
  t.equal(cgroup2Mount(HYBRID.split('\n').slice(0, 2).join('\n')), null, 'v1 only: nothing to set');
});

t.test('leaves a favored or absent hierarchy alone (no mount is run)', async (t) => {
  t.same(favorDynmods(HYBRID.replace('cgroup2 rw', 'cgroup2 rw,favordynmods')), {
    state: 'already',
    mountPoint: '/sys/fs/cgroup/unified',
  });
  t.same(favorDynmods(HYBRID.split('\n')[1]!), { state: 'no_cgroup2' });
  // A mount point that does not exist: mount fails and says why (the runner then warns and goes on).
  const r = favorDynmods('41 31 0:38 / /nonexistent/capsule-cgroup2 rw - cgroup2 cgroup2 rw');
  t.equal(r.state, 'failed');
  t.match(r, { mountPoint: '/nonexistent/capsule-cgroup2', reason: /\S/ });
});

t.test('option: on by default, 0 turns it off, anything else is refused', async (t) => {
  const env = { CAPSULE_RUNNER_STATE_DIR: '/tmp/capsule-dynmods-config' };
  t.equal(loadConfig(env, []).cgroupFavorDynmods, true);
  t.equal(loadConfig(env, ['--cgroup_favordynmods=0']).cgroupFavorDynmods, false);
  t.equal(loadConfig({ ...env, CAPSULE_RUNNER_CGROUP_FAVORDYNMODS: '1' }, []).cgroupFavorDynmods, true);
  t.throws(() => loadConfig(env, ['--cgroup_favordynmods=yes']), { message: 'cgroup_favordynmods: 0 or 1' });
});

t.test('a started runner leaves the host cgroup2 hierarchy with the flag', async (t) => {
  const before = cgroup2Mount(readFileSync('/proc/self/mountinfo', 'utf8'));
  if (!before) {
    t.pass('this host has no cgroup2 mount: nothing to set');
    return;
  }
  const r = await startRunner();
  t.teardown(() => r.stop());
  t.equal(cgroup2Mount(readFileSync('/proc/self/mountinfo', 'utf8'))?.favored, true);
  t.notMatch(r.stderr(), /favordynmods not set/);
});
