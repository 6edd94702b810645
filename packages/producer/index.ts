/**
 * `@hookline/producer`: a client for producer services that hand events to Hookline, with nothing
 * but Node's built-ins and its global fetch, and the types of the events.
 */
export * from './producer.js';
export * from './events.js';
export * from '../wire/events.js';
