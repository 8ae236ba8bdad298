// The browser verifier page in real headless Chromium against a real
// `capsule serve`: with the network cut after load, every proof vector pasted
// into the page gives the verdict the proof library gives; a dropped file
// and a `?capsule=` link work; labels, keyboard access and contrast hold.
import t from 'tap';
import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { verdictLine, verifyProof } from '../../shared/proof/index.js';
import { Browser, CHROMIUM } from '../helpers/chromium.js';
import { serve, signupKey } from '../helpers/serve.js';

const VECTOR_DIRS = [
  fileURLToPath(new URL('../../../test/data/cdp-vectors', import.meta.url)),
  ...(existsSync('/work/shared/cdp/vectors') ? ['/work/shared/cdp/vectors'] : []),
];

async function api(url: string, key: string, method: string, path: string, body?: unknown): Promise<any> {
  const r = await fetch(url + path, {
    method,
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
  });
  return r.json();
}

t.test('verifier page in Chromium', { skip: existsSync(CHROMIUM) ? false : `no ${CHROMIUM}` }, async (t) => {
  const s = await serve();
  t.teardown(s.stop);
  const browser = await Browser.launch();
  t.teardown(() => browser.close());
  const page = await browser.newPage();

  const head = await fetch(`${s.url}/verify`);
  t.equal(head.status, 200);
  t.match(head.headers.get('content-type'), /^text\/html/);
  t.match(head.headers.get('content-security-policy'), /script-src 'self'/);
  t.notMatch(await head.text(), /<script>(?!<)/, 'no inline script');

  await page.goto(`${s.url}/verify`);
  await page.offline(true);
  t.equal(
    await page.eval<string>("fetch('/v1/health').then(() => 'online', () => 'offline')"),
    'offline',
    'the network is cut',
  );

  const paste = async (text: string) => {
    await page.eval(`(() => {
      const v = document.getElementById('verdict'); v.dataset.state = 'pending';
      document.getElementById('proof-text').value = ${JSON.stringify(text)};
      document.getElementById('verify-button').click(); })()`);
    await page.waitFor("document.getElementById('verdict').dataset.state !== 'pending'");
    return page.eval<{
      text: string;
      state: string;
      failure: string | null;
      stage: string | null;
      rows: number;
    }>(`(() => {
      const v = document.getElementById('verdict');
      return { text: v.textContent, state: v.dataset.state, failure: v.dataset.failure ?? null, stage: v.dataset.stage ?? null,
               rows: document.querySelectorAll('#steps tbody tr').length }; })()`);
  };

  let n = 0;
  for (const dir of VECTOR_DIRS) {
    for (const f of readdirSync(join(dir, 'proofs')).sort()) {
      const v = JSON.parse(readFileSync(join(dir, 'proofs', f), 'utf8'));
      // Without a trust manifest (the page has none) managed-authority vectors verify through stage 5.
      const expected = verifyProof(v.document);
      if (!v.manifest) t.equal(expected.valid, v.expect.valid, `${f}: library verdict is the vector's`);
      const got = await paste(JSON.stringify(v.document));
      t.equal(got.state, expected.valid ? 'valid' : 'invalid', `${f}: verdict`);
      t.equal(got.text, verdictLine(expected), `${f}: the page words it as the library does`);
      if (!expected.valid) {
        t.equal(
          got.failure,
          `${expected.failure_reason.type}/${expected.failure_reason.reason}`,
          `${f}: failure type/reason`,
        );
        t.equal(got.stage, String(expected.stage_reached), `${f}: failed stage`);
        if (!v.manifest) t.same(expected.failure_reason, v.expect.failure_reason);
      }
      t.notMatch(got.text, /destruction verified/i);
      n++;
    }
  }
  t.ok(n >= 64, `${n} vectors checked in the page with the network cut`);
  const engine = await page.eval<string>("document.getElementById('crypto-note').textContent");
  t.match(engine, /Signature checked with (WebCrypto Ed25519|@noble\/ed25519)/);
  t.comment(engine);
  t.equal((await paste('{ not json')).state, 'invalid');

  // A dropped file.
  const good = readFileSync(join(VECTOR_DIRS[0]!, 'proofs/valid-2.1-record.json'), 'utf8');
  const doc = JSON.parse(good).document;
  await page.eval(`(() => {
    document.getElementById('verdict').dataset.state = 'pending';
    const dt = new DataTransfer(); dt.items.add(new File([${JSON.stringify(JSON.stringify(doc))}], 'proof.json', { type: 'application/json' }));
    document.getElementById('drop-zone').dispatchEvent(new DragEvent('drop', { dataTransfer: dt, bubbles: true, cancelable: true })); })()`);
  await page.waitFor("document.getElementById('verdict').dataset.state !== 'pending'");
  t.equal(
    await page.eval("document.getElementById('verdict').textContent"),
    'AuditProof verified',
    'dropped file verified',
  );
  t.equal(await page.eval("document.querySelectorAll('#steps tbody tr').length"), 8, 'the 8 steps are shown');
  t.match(await page.eval("document.getElementById('facts').textContent"), doc.attestation.key_id, 'key id shown');
  t.match(await page.eval("document.getElementById('activity').textContent"), /\d+ events: /);

  // Accessibility: every form control labelled, the drop zone reachable by keyboard, verdict announced, contrast.
  const a11y = await page.eval<any>(`(() => {
    const unlabelled = [...document.querySelectorAll('textarea, input')].filter((e) => !document.querySelector('label[for="' + e.id + '"]')).map((e) => e.id);
    const zone = document.getElementById('drop-zone');
    const lum = (c) => { const [r, g, b] = c.match(/\\d+/g).slice(0, 3).map((x) => { x = x / 255; return x <= 0.03928 ? x / 12.92 : ((x + 0.055) / 1.055) ** 2.4; }); return 0.2126 * r + 0.7152 * g + 0.0722 * b; };
    const ratio = (el) => { const s = getComputedStyle(el); let bg = s.backgroundColor; let p = el; while (bg === 'rgba(0, 0, 0, 0)' && p.parentElement) { p = p.parentElement; bg = getComputedStyle(p).backgroundColor; } if (bg === 'rgba(0, 0, 0, 0)') bg = 'rgb(255, 255, 255)'; const [l1, l2] = [lum(s.color), lum(bg)].sort((x, y) => y - x); return (l1 + 0.05) / (l2 + 0.05); };
    const els = ['verdict', 'drop-zone', 'verify-button', 'crypto-note'].map((id) => document.getElementById(id)).concat([...document.querySelectorAll('p, td, dt, dd, label, h1, h2, h3')]);
    return { unlabelled, tabindex: zone.tabIndex, role: zone.getAttribute('role'), live: document.getElementById('verdict').getAttribute('aria-live'),
             minContrast: Math.min(...els.map(ratio)), lang: document.documentElement.lang }; })()`);
  t.same(a11y.unlabelled, [], 'every control has a label');
  t.equal(a11y.tabindex, 0);
  t.equal(a11y.role, 'button');
  t.equal(a11y.live, 'polite');
  t.equal(a11y.lang, 'en');
  t.ok(a11y.minContrast >= 4.5, `text contrast at least 4.5:1 (WCAG AA), lowest ${a11y.minContrast.toFixed(2)}`);
  // Enter on the focused drop zone opens the file chooser (the input's click handler fires).
  await page.eval(`(() => { window.__opened = false; document.getElementById('proof-file').addEventListener('click', (e) => { window.__opened = true; e.preventDefault(); }, { once: true });
    const z = document.getElementById('drop-zone'); z.focus(); z.dispatchEvent(new KeyboardEvent('keydown', { key: 'Enter', bubbles: true })); })()`);
  t.equal(await page.eval('window.__opened'), true, 'Enter on the drop zone opens the file chooser');

  // ?capsule=: the public proof of a capsule destroyed on this server.
  await page.offline(false);
  const key = await signupKey(s.url);
  const c = await api(s.url, key, 'POST', '/v1/capsules', { ttl: 60 });
  await api(s.url, key, 'POST', `/v1/capsules/${c.id}/exec`, { command: 'echo hi > /data/output/x.txt' });
  await api(s.url, key, 'DELETE', `/v1/capsules/${c.id}`);
  await page.goto(`${s.url}/verify?capsule=${c.id}`);
  await page.waitFor("['valid', 'invalid'].includes(document.getElementById('verdict').dataset.state)");
  t.equal(await page.eval("document.getElementById('verdict').textContent"), 'AuditProof verified');
  t.match(await page.eval("document.getElementById('notice').textContent"), /not a compliance certification/);
  t.match(await page.eval("document.getElementById('facts').textContent"), c.id);
  if (process.env.CAPSULE_VERIFY_SCREENSHOT)
    writeFileSync(process.env.CAPSULE_VERIFY_SCREENSHOT, await page.screenshot());
  await page.goto(`${s.url}/verify?capsule=cap_doesnotexist`);
  await page.waitFor("document.getElementById('verdict').dataset.state === 'invalid'");
  t.match(await page.eval("document.getElementById('verdict').textContent"), /Could not load the proof/);
});
