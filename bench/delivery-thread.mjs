// The delivery thread's entry (see delivery-thread.ts): a worker_threads thread does not inherit the
// TypeScript loader the bench runs under, so it registers one and imports the thread's source.
import { tsImport } from 'tsx/esm/api';

await tsImport('./delivery-thread.ts', import.meta.url);
