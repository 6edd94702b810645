/**
 * `hookline/verify`, kept for receivers that import it from the engine's package: the code is the
 * `@hookline/verify` package's, which installs without the engine (docs/receiving-webhooks.md, "Verifying a request").
 */
export * from '@hookline/verify';
