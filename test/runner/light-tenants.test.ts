// Which tenants' execs run in the quick lane: light ones, by their exec time
// (CPU when known, else wall) decaying by half every 2 s (budget 700 ms), once
// seen and one exec at a time, with a manual clock.
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

/** Makes `key` a tenant this node has seen: one instant exec, ended. */
function seen(light: LightTenants, key: string): void {
  light.start(key)();
}

t.test('light is earned: a tenant never seen is not light until an exec of its own has ended', async (t) => {
  const { light, advance } = setup();
  t.notOk(light.isLight('new'), 'never seen: not trusted with the lane');
  const end = light.start('new');
  t.notOk(light.isLight('new'), 'nor while its first exec runs');
  advance(20);
  end();
  t.ok(light.isLight('new'), 'seen, and 20 ms of exec time: light');
  advance(60_000);
  t.ok(light.isLight('new'), 'a minute later, its time decayed away and forgotten, it is still known');
});

t.test('one exec at a time: a second exec running at once is not light', async (t) => {
  const { light } = setup();
  seen(light, 'a');
  const first = light.start('a');
  t.ok(light.isLight('a'), 'its one running exec is light (asked after start)');
  const second = light.start('a');
  t.notOk(light.isLight('a'), 'two at once: not light');
  second();
  t.ok(light.isLight('a'), 'back to one');
  first();
  t.ok(light.isLight('a'));
});

t.test('one long exec makes a tenant heavy, while it runs and until its time decays', async (t) => {
  const { light, advance } = setup();
  seen(light, 'a');
  seen(light, 'b');
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
  seen(light, 'victim');
  seen(light, 'loop');
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

t.test('an ended exec counts the CPU it used when known, its wall time otherwise', async (t) => {
  const { light, advance } = setup();
  seen(light, 'waiting');
  seen(light, 'unknown');
  // A 20 ms command that took 900 ms because it waited for a CPU on a busy node.
  let end = light.start('waiting');
  advance(900);
  end(20);
  t.ok(light.isLight('waiting'), '900 ms of wall time but 20 ms of CPU: light');
  end = light.start('unknown');
  advance(900);
  end(null);
  t.notOk(light.isLight('unknown'), 'no CPU figure: its 900 ms of wall time count');
  end = light.start('waiting');
  advance(100);
  end(800);
  t.notOk(light.isLight('waiting'), '800 ms of CPU in 100 ms (several processes): heavy');
});

t.test('concurrent execs of one tenant count together', async (t) => {
  const { light, advance } = setup();
  seen(light, 'four');
  const ends = [1, 2, 3, 4].map(() => light.start('four'));
  advance(200);
  t.notOk(light.isLight('four'), 'four execs 200 ms in: 800 ms');
  for (const e of ends) e();
  t.notOk(light.isLight('four'), 'ended: their 800 ms stay');
});

t.test('the tenants remembered as seen are bounded: the one longest without an exec is forgotten first', async (t) => {
  const { light } = setup();
  seen(light, 'oldest');
  seen(light, 'kept');
  for (let i = 0; i < 9_998; i++) seen(light, `t${i}`);
  seen(light, 'kept'); // its latest exec moves it to the back
  t.ok(light.isLight('oldest') && light.isLight('kept'), '10,000 remembered');
  seen(light, 'one-more');
  t.notOk(light.isLight('oldest'), 'the 10,001st pushed out the one longest without an exec');
  t.ok(light.isLight('kept'), 'one with a recent exec stays');
});
