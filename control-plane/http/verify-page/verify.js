// The browser verifier: the service's own proof library (shared/proof), run in
// this page. The Ed25519 check uses WebCrypto where the browser has it and
// @noble/ed25519 otherwise; everything else is the library's synchronous code.
import { verifyProof, nobleCrypto, STAGE_NAMES, verdictLine } from '/verify/assets/shared/proof/index.js';

const $ = (id) => document.getElementById(id);

/** Whether this browser's WebCrypto verifies Ed25519 (checked once, on an RFC 8032 test vector). */
const webCryptoEd25519 = (async () => {
  try {
    const hex = (h) => new Uint8Array(h.match(/../g).map((b) => parseInt(b, 16)));
    const key = await crypto.subtle.importKey(
      'raw',
      hex('d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a'),
      { name: 'Ed25519' },
      false,
      ['verify'],
    );
    const sig = hex(
      'e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b',
    );
    return (await crypto.subtle.verify({ name: 'Ed25519' }, key, sig, new Uint8Array(0))) === true;
  } catch {
    return false;
  }
})();

async function webCryptoVerify(sig, msg, pub) {
  try {
    const key = await crypto.subtle.importKey('raw', pub, { name: 'Ed25519' }, false, ['verify']);
    return await crypto.subtle.verify({ name: 'Ed25519' }, key, sig, msg);
  } catch {
    return false;
  }
}

/**
 * verifyProof with WebCrypto for the signature: the library calls
 * ed25519Verify once (stage 5); the call is recorded and answered "yes", then
 * checked asynchronously, and a "no" turns the result into the stage-5
 * failure the library itself would have given.
 */
export async function verifyInPage(doc) {
  if (!(await webCryptoEd25519)) return { result: verifyProof(doc, { crypto: nobleCrypto }), engine: '@noble/ed25519' };
  let call = null;
  const recording = {
    sha512: (d) => nobleCrypto.sha512(d),
    ed25519Verify(sig, msg, pub) {
      call = [sig.slice(), msg.slice(), pub.slice()];
      return true;
    },
  };
  const result = verifyProof(doc, { crypto: recording });
  if (call && !(await webCryptoVerify(...call))) {
    const stage5 = {
      valid: false,
      stage_reached: 5,
      failure_reason: { type: 'SignatureMismatch', reason: 'DoesNotVerify' },
      verified_at: result.verified_at,
    };
    return { result: stage5, engine: 'WebCrypto Ed25519' };
  }
  return { result, engine: 'WebCrypto Ed25519' };
}

function fact(dl, term, value) {
  if (value === undefined || value === null || value === '') return;
  const dt = document.createElement('dt');
  dt.textContent = term;
  const dd = document.createElement('dd');
  dd.textContent = String(value);
  dl.append(dt, dd);
}

function show(doc, result, engine) {
  const v = $('verdict');
  v.textContent = verdictLine(result);
  v.dataset.state = result.valid ? 'valid' : 'invalid';
  if (!result.valid) {
    v.dataset.stage = String(result.stage_reached);
    v.dataset.failure = `${result.failure_reason.type}/${result.failure_reason.reason}`;
  } else {
    delete v.dataset.stage;
    delete v.dataset.failure;
  }
  $('crypto-note').textContent = `Signature checked with ${engine}. Stages: ${STAGE_NAMES.slice(0, 6).join(', ')}.`;
  const details = $('details');
  if (doc === null || typeof doc !== 'object' || Array.isArray(doc)) {
    details.hidden = true;
    return;
  }
  details.hidden = false;
  const dl = $('facts');
  dl.replaceChildren();
  const att = doc.attestation && typeof doc.attestation === 'object' ? doc.attestation : {};
  fact(dl, 'Capsule', doc.capsule_id ?? doc.session_id);
  fact(dl, 'Format', doc.cdp_version);
  fact(dl, 'Created', doc.created_at);
  fact(dl, 'Destroyed', doc.destroyed_at);
  fact(dl, 'Completeness', doc.completeness);
  fact(dl, 'Key id', att.key_id);
  fact(dl, 'Signing authority', doc.signing_authority_id ?? 'per-proof ephemeral key (no registered authority)');
  if (doc.signing_key_version !== undefined) fact(dl, 'Key version', doc.signing_key_version);
  if (doc.termination && typeof doc.termination === 'object') fact(dl, 'Termination', doc.termination.trigger);
  const body = $('steps').tBodies[0];
  body.replaceChildren();
  for (const s of Array.isArray(doc.chain) ? doc.chain : []) {
    const tr = document.createElement('tr');
    for (const [val, cls] of [[s?.step], [s?.subsystem], [s?.operation], [s?.chain_hash, 'hash']]) {
      const td = document.createElement('td');
      td.textContent = val === undefined ? '' : String(val);
      if (cls) td.className = cls;
      tr.append(td);
    }
    body.append(tr);
  }
  const activity = Array.isArray(doc.activity) ? doc.activity : null;
  if (activity) {
    const counts = new Map();
    for (const e of activity) counts.set(e?.type, (counts.get(e?.type) ?? 0) + 1);
    $('activity').textContent = `${activity.length} events: ${[...counts].map(([t, n]) => `${t} ×${n}`).join(', ')}`;
  } else {
    $('activity').textContent = doc.activity_root
      ? 'The activity trail is not in this document; its Merkle root is signed.'
      : 'No activity trail.';
  }
  const reg = doc.regulatory_context;
  $('notice').textContent =
    reg && typeof reg === 'object' && typeof reg.notice === 'string'
      ? reg.notice
      : 'No regulatory mapping in this proof.';
}

async function verifyText(text) {
  let doc;
  try {
    doc = JSON.parse(text);
  } catch (e) {
    const v = $('verdict');
    v.textContent = `Not JSON: ${e.message}`;
    v.dataset.state = 'invalid';
    $('details').hidden = true;
    return;
  }
  const { result, engine } = await verifyInPage(doc);
  show(doc, result, engine);
}

async function verifyFile(file) {
  const text = await file.text();
  $('proof-text').value = text;
  await verifyText(text);
}

function init() {
  $('verify-button').addEventListener('click', () => verifyText($('proof-text').value));
  $('proof-file').addEventListener('change', (e) => {
    const f = e.target.files?.[0];
    if (f) verifyFile(f);
  });
  const zone = $('drop-zone');
  zone.addEventListener('keydown', (e) => {
    if (e.key === 'Enter' || e.key === ' ') {
      e.preventDefault();
      $('proof-file').click();
    }
  });
  zone.addEventListener('click', () => $('proof-file').click());
  zone.addEventListener('dragover', (e) => {
    e.preventDefault();
    zone.classList.add('over');
  });
  zone.addEventListener('dragleave', () => zone.classList.remove('over'));
  zone.addEventListener('drop', (e) => {
    e.preventDefault();
    zone.classList.remove('over');
    const f = e.dataTransfer?.files?.[0];
    if (f) verifyFile(f);
  });
  const capsule = new URLSearchParams(location.search).get('capsule');
  if (capsule) {
    if (!/^[A-Za-z0-9_]{1,128}$/.test(capsule)) {
      $('verdict').textContent = 'The capsule parameter is not a capsule id.';
      return;
    }
    $('verdict').textContent = `Loading the public proof of ${capsule}…`;
    fetch(`/v1/capsules/${encodeURIComponent(capsule)}/cdp/verify`)
      .then(async (r) => {
        const text = await r.text();
        if (!r.ok) {
          let msg = `HTTP ${r.status}`;
          try {
            msg = JSON.parse(text).error.message;
          } catch {
            /* keep the status */
          }
          $('verdict').textContent = `Could not load the proof of ${capsule}: ${msg}`;
          $('verdict').dataset.state = 'invalid';
          return;
        }
        $('proof-text').value = text;
        await verifyText(text);
      })
      .catch((e) => {
        $('verdict').textContent = `Could not load the proof of ${capsule}: ${e.message}`;
      });
  }
  document.body.dataset.ready = 'true';
}

init();
