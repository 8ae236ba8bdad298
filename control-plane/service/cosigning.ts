// Customer co-signing hooked into the trail: every event a capsule's trail
// gains (whichever use case appends it) is handed to the co-signer when the
// capsule has a co-signing session. The store is wrapped, not the call sites,
// so no event can be appended without being offered for a signature.
import type { CosignPort, Store } from '../domain/index.js';

export function withCosigning(store: Store, cosign: CosignPort): Store {
  const append: Store['appendActivity'] = async (capsuleId, type, at, fields, side) => {
    const ev = await store.appendActivity(capsuleId, type, at, fields, side);
    if (ev && cosign.isOpen(capsuleId)) cosign.submit(capsuleId, ev);
    return ev;
  };
  // Methods are bound once: the store is on every request's path.
  const bound = new Map<PropertyKey, unknown>();
  return new Proxy(store, {
    get(target, prop) {
      if (prop === 'appendActivity') return append;
      const v: unknown = Reflect.get(target, prop, target);
      if (typeof v !== 'function') return v;
      let b = bound.get(prop);
      if (!b) bound.set(prop, (b = (v as (...a: unknown[]) => unknown).bind(target)));
      return b;
    },
  });
}
