// The capsule tmpfs helper: mount, unmount (lazily while something holds it open) and the
// mount check that reads devices instead of the host's mount table.
import t from 'tap';
import { closeSync, mkdirSync, mkdtempSync, openSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { mountinfoOfAsync } from '../../sandbox-runner/host.js';
import { isMountPoint, Mounter } from '../../sandbox-runner/tmpfs.js';

/** The oracle: this process's mount table lists dir. */
const isMounted = async (dir: string): Promise<boolean> =>
  (await mountinfoOfAsync('self')).some((m) => m.mount_point === dir);

t.test('isMountPoint agrees with the mount table through mount, unmount and lazy unmount', async (t) => {
  const root = mkdtempSync(join(tmpdir(), 'capsule-tmpfs-'));
  const dir = join(root, 'cap');
  mkdirSync(dir);
  const m = Mounter.start();
  t.teardown(async () => {
    await m.close();
    rmSync(root, { recursive: true, force: true });
  });

  t.equal(await isMountPoint(dir), false, 'a plain directory is no mount point');
  t.equal(await isMountPoint(join(root, 'absent')), false, 'a missing directory is no mount point');

  await m.mount(dir, 1, 64);
  t.equal(await isMounted(dir), true, 'the mount table lists it');
  t.equal(await isMountPoint(dir), true, 'its device differs from its parent');
  t.same(await m.unmount(dir), { gone: true, lazy: false }, 'unmounted, not lazily');
  t.equal(await isMounted(dir), false, 'the mount table no longer lists it');

  await m.mount(dir, 1, 64);
  const fd = openSync(dir, 'r'); // something holds it: umount answers EBUSY, the helper detaches it
  try {
    t.same(await m.unmount(dir), { gone: true, lazy: true }, 'detached lazily, and gone from this namespace');
    t.equal(await isMounted(dir), false, 'the mount table agrees');
  } finally {
    closeSync(fd);
  }
});
