// Public entry of the runner adapter.
export { ReconnectingRunner } from './reconnecting.js';
export { RunnerFleet, dnsAddresses, type FleetOptions, type RunnerAddress } from './fleet.js';
