// Public entry of the runner adapter.
export { ReconnectingRunner } from './reconnecting.js';
