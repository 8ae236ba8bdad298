// Public entry of the domain layer.
export * from './types.js';
export * from './ports.js';
export * from './tiers.js';
export * from './schemas.js';
export * from './prices.js';
export * from './webhooks.js';
