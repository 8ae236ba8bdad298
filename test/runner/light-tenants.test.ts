// Which tenants' execs run in the quick lane: light ones, by their exec time
// decaying by half every 2 s (budget 700 ms), with a manual clock.
import t from 'tap';
import { LightTenants } from '../../sandbox-runner/light-tenants.js';

function setup(): { light: LightTenants; advance: (ms: number) => void } {
  let now = 1_000;
  return {
    light: new LightTenants({ monotonicMs: () => now }),
    advance: (ms) => {
      now += ms;
    },
  };
}

t.test('one long exec makes a tenant heavy, while it runs and until its time decays', async (t) => {
  const { light, advance } = setup();
  t.ok(light.isLight('a'), 'a tenant never seen is light');
  const end = light.start('a');
  advance(600);
  t.ok(light.isLight('a'), '600 ms into its first exec: under the budget');
  advance(400);
  t.notOk(light.isLight('a'), 'an exec running for 1 s counts before it ends');
  t.ok(light.isLight('b'), 'another tenant is not affected');
  end();
  end(); // a second call changes nothing
  t.notOk(light.isLight('a'), 'ended: its 1,000 ms stay');
  advance(1000);
  t.notOk(light.isLight('a'), '1 s later 707 ms remain');
  advance(100);
  t.ok(light.isLight('a'), 'and a little later it is light again (1,000 x 0.5^0.55 = 683 ms)');
});

t.test('short execs back to back add up; the same pace with pauses does not', async (t) => {
  const { light, advance } = setup();
  // 20 ms commands every 300 ms (the soak's victim): settles near 20 / (1 - 0.5^0.15) = 204 ms.
  for (let i = 0; i < 100; i++) {
    const end = light.start('victim');
    advance(20);
    end();
    advance(280);
  }
  t.ok(light.isLight('victim'), 'a lifecycle every 300 ms stays light');
  // 50 ms commands with no pause (a loop of execs): heavy after about a second of them.
  let execs = 0;
  while (light.isLight('loop') && execs < 100) {
    const end = light.start('loop');
    advance(50);
    end();
    execs++;
  }
  t.ok(execs > 5 && execs < 20, `a tenant running execs back to back is heavy after ${execs} of them`);
});

t.test('concurrent execs of one tenant count together', async (t) => {
  const { light, advance } = setup();
  const ends = [1, 2, 3, 4].map(() => light.start('four'));
  advance(200);
  t.notOk(light.isLight('four'), 'four execs 200 ms in: 800 ms');
  for (const e of ends) e();
  t.notOk(light.isLight('four'));
});
