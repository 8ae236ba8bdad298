// Test hosts on this machine: network namespaces joined to a bridge in the
// root namespace by veth pairs, each with its own address, so that traffic
// between the control plane (root namespace) and a host really crosses
// interfaces. Names carry the test's pid; remove() deletes everything.
import { execFileSync } from 'node:child_process';

export interface TestHosts {
  /** Address of the bridge (the root namespace's side). */
  gateway: string;
  hosts: { netns: string; address: string }[];
  remove(): void;
}

const ip = (...args: string[]): void => {
  execFileSync('ip', args, { stdio: ['ignore', 'ignore', 'pipe'] });
};

/** `count` hosts on 10.<a>.<b>.0/24 (derived from the pid, so concurrent tests do not collide). */
export function testHosts(count: number): TestHosts {
  const tag = (process.pid % 9000) + 1000;
  const net = `10.${200 + (tag % 50)}.${Math.floor(tag / 50) % 250}`;
  const bridge = `cbr${tag}`;
  const hosts: TestHosts['hosts'] = [];
  const remove = (): void => {
    for (let i = 0; i < count; i++) {
      try {
        ip('netns', 'del', `cn${tag}h${i}`);
      } catch {
        /* not made */
      }
    }
    try {
      ip('link', 'del', bridge);
    } catch {
      /* not made */
    }
  };
  remove();
  try {
    ip('link', 'add', bridge, 'type', 'bridge');
    ip('addr', 'add', `${net}.1/24`, 'dev', bridge);
    ip('link', 'set', bridge, 'up');
    for (let i = 0; i < count; i++) {
      const ns = `cn${tag}h${i}`;
      const outer = `cv${tag}h${i}`;
      const address = `${net}.${11 + i}`;
      ip('netns', 'add', ns);
      ip('link', 'add', outer, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', ns);
      ip('link', 'set', outer, 'master', bridge, 'up');
      ip('-n', ns, 'addr', 'add', `${address}/24`, 'dev', 'eth0');
      ip('-n', ns, 'link', 'set', 'eth0', 'up');
      ip('-n', ns, 'link', 'set', 'lo', 'up');
      hosts.push({ netns: ns, address });
    }
  } catch (e) {
    remove();
    throw e;
  }
  return { gateway: `${net}.1`, hosts, remove };
}
