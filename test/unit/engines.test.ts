import { readFileSync } from 'node:fs';
import path from 'node:path';
import semver from 'semver';
import { describe, expect, it } from 'vitest';

const root = path.resolve(import.meta.dirname, '../..');

interface LockPackage {
  version?: string;
  engines?: { node?: string } | string[];
  dev?: boolean;
  optional?: boolean;
}

describe('supported Node versions', () => {
  const pkg = JSON.parse(readFileSync(path.join(root, 'package.json'), 'utf8')) as { engines: { node: string } };
  const lock = JSON.parse(readFileSync(path.join(root, 'package-lock.json'), 'utf8')) as {
    packages: Record<string, LockPackage>;
  };
  const floor = semver.minVersion(pkg.engines.node)?.version ?? '';

  it('declares Node 20.19 as the floor', () => {
    expect(floor).toBe('20.19.0');
  });

  it.each(['20.19.0', '22.13.0', '24.0.0'])(
    'every locked package (runtime and test) accepts Node %s',
    (nodeVersion) => {
      const refusing = Object.entries(lock.packages)
        .filter(([name, p]) => name !== '' && !Array.isArray(p.engines) && p.engines?.node !== undefined)
        .filter(
          ([, p]) => !semver.satisfies(nodeVersion, (p.engines as { node: string }).node, { includePrerelease: true }),
        )
        .map(([name, p]) => `${name}@${p.version ?? '?'} (${(p.engines as { node: string }).node})`);
      expect(refusing).toEqual([]);
    },
  );
});
