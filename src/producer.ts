/**
 * `hookline/producer`, kept for producers that import it from the engine's package: the code is the
 * `@hookline/producer` package's, which installs without the engine (docs/api.md, "Ingest").
 */
export * from '@hookline/producer';
