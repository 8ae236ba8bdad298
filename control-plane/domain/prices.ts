// The price table behind the usage estimate (policies/prices.yaml, read by
// config.ts) and the one estimate computation. Money is integer micro-units
// (millionths of the currency unit) inside, decimal strings on the wire.
import type { Tier, UsageCounts, UsageKind } from './types.js';

/** Metered line items, each fed by one usage kind. */
export const METERED = ['capsules', 'proofs', 'exec_seconds', 'egress_requests'] as const;
export type Metered = (typeof METERED)[number];

/** Usage kind of each metered item, and how many of the kind's units make one billed unit (exec: ms per second). */
export const METERED_SOURCE: Record<Metered, { kind: UsageKind; scale: number }> = {
  capsules: { kind: 'capsule', scale: 1 },
  proofs: { kind: 'proof', scale: 1 },
  exec_seconds: { kind: 'exec', scale: 1000 },
  egress_requests: { kind: 'egress_request', scale: 1 },
};

export interface TierPrice {
  /** Monthly base fee, micro-units. */
  base_fee: number;
  metered: Record<Metered, { included: number; unit_price: number }>;
}

export interface PriceTable {
  currency: string;
  tiers: Record<Tier, TierPrice>;
}

const DECIMAL_RE = /^\d{1,9}(\.\d{1,6})?$/;

/** "0.0004" -> 400 micro-units; null when not a plain non-negative decimal of at most 6 places. */
export function toMicros(s: string): number | null {
  if (!DECIMAL_RE.test(s)) return null;
  const [whole, frac = ''] = s.split('.');
  return Number(whole) * 1_000_000 + Number(frac.padEnd(6, '0'));
}

/** Micro-units to a decimal string with `places` digits (rounded half up). */
export function formatMicros(micros: number, places = 2): string {
  const unit = 10 ** (6 - places);
  const n = Math.round(micros / unit);
  if (places === 0) return String(n);
  const s = String(n).padStart(places + 1, '0');
  return `${s.slice(0, -places)}.${s.slice(-places)}`;
}

/** A unit price as a decimal string with no trailing zeros beyond two places. */
export function formatUnitPrice(micros: number): string {
  const s = formatMicros(micros, 6);
  return s.replace(/(\.\d\d\d*?)0+$/, '$1');
}

/** Micro-units rounded half up to a whole cent (10,000 micro-units). */
const cents = (micros: number): number => Math.round(micros / 10_000) * 10_000;

export interface EstimateLine {
  item: Metered;
  quantity_to_date: number;
  projected_quantity: number;
  included: number;
  billable_quantity: number;
  unit_price: string;
  amount_to_date: string;
  amount: string;
}

export interface Estimate {
  currency: string;
  base_fee: string;
  line_items: EstimateLine[];
  total_to_date: string;
  projected_total: string;
}

/**
 * Charges of the billable usage so far (`used`, in usage-kind units) and of the
 * whole cycle projected linearly from it: `projection` is cycle length over
 * elapsed time.
 */
export function estimateCharges(prices: PriceTable, tier: Tier, used: UsageCounts, projection: number): Estimate {
  const p = prices.tiers[tier];
  let toDate = cents(p.base_fee);
  let projected = cents(p.base_fee);
  const line_items = METERED.map((item): EstimateLine => {
    const { kind, scale } = METERED_SOURCE[item];
    const { included, unit_price } = p.metered[item];
    const raw = used[kind].quantity;
    const rawProjected = Math.round(raw * projection);
    const over = (q: number): number => Math.max(0, q - included * scale);
    // Each line is rounded to the cent before summing: the total is the sum of the lines shown.
    const amountToDate = cents((over(raw) * unit_price) / scale);
    const amount = cents((over(rawProjected) * unit_price) / scale);
    toDate += amountToDate;
    projected += amount;
    return {
      item,
      quantity_to_date: raw / scale,
      projected_quantity: rawProjected / scale,
      included,
      billable_quantity: over(rawProjected) / scale,
      unit_price: formatUnitPrice(unit_price),
      amount_to_date: formatMicros(amountToDate),
      amount: formatMicros(amount),
    };
  });
  return {
    currency: prices.currency,
    base_fee: formatMicros(p.base_fee),
    line_items,
    total_to_date: formatMicros(toDate),
    projected_total: formatMicros(projected),
  };
}
