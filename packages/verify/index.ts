/**
 * `@hookline/verify`: what a webhook receiver needs from Hookline, with nothing but Node's built-ins:
 * signature checks, the signing functions themselves (for a receiver's tests), and the types of the
 * bodies Hookline sends.
 */
export * from './verify.js';
export * from './signature.js';
export * from './envelope.js';
export * from '../wire/events.js';
