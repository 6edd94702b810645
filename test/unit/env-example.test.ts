import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { envSchema, loadConfig } from '../../src/config/env.js';

const root = path.resolve(import.meta.dirname, '../..');

/** Variable names mentioned (set or commented out) in a file, `NAME=` form. */
function namesIn(file: string): string[] {
  return [...readFileSync(path.join(root, file), 'utf8').matchAll(/^#?\s?([A-Z][A-Z0-9_]+)=/gm)].map((m) => m[1] ?? '');
}

describe('.env.example and docs/configuration.md mirror the config schema', () => {
  const schemaNames = Object.keys(envSchema.shape).sort();

  it('.env.example names every variable, and only those', () => {
    expect([...new Set(namesIn('.env.example'))].sort()).toEqual(schemaNames);
  });

  it('its uncommented values parse and equal the defaults', () => {
    const values: Record<string, string> = Object.fromEntries(
      [...readFileSync(path.join(root, '.env.example'), 'utf8').matchAll(/^([A-Z][A-Z0-9_]+)=(.*)$/gm)].map((m) => [
        m[1] ?? '',
        m[2] ?? '',
      ]),
    );
    expect(loadConfig(values)).toEqual(loadConfig({}));
  });

  it('the configuration table (docs/configuration.md) lists every variable', () => {
    const table = readFileSync(path.join(root, 'docs/configuration.md'), 'utf8');
    for (const name of schemaNames) expect(table).toContain(`| \`${name}\``);
  });
});
