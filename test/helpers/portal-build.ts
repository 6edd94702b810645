import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';

/** What the fake build's files hold. */
export const FAKE_PORTAL = {
  script: 'export const portal = 1;\n',
  styles: 'body { color: black; }\n',
  index:
    '<!doctype html><html><head><script type="module" src="assets/app-ABCD1234.js"></script></head><body></body></html>\n',
};

/**
 * A build as web/portal/build.mjs writes one, plus files the server must not serve, in a folder of
 * its own (the caller removes it): for tests of an API that serves the portal, whether or not the
 * checkout has built it (a clean clone has not; its server answers 503 then).
 */
export function fakePortalBuild(): string {
  const dir = mkdtempSync(path.join(tmpdir(), 'hookline-portal-assets-'));
  mkdirSync(path.join(dir, 'assets'));
  writeFileSync(path.join(dir, 'index.html'), FAKE_PORTAL.index);
  writeFileSync(path.join(dir, 'assets', 'app-ABCD1234.js'), FAKE_PORTAL.script);
  writeFileSync(path.join(dir, 'assets', 'app-EFGH5678.css'), FAKE_PORTAL.styles);
  writeFileSync(path.join(dir, 'assets', 'unhashed.js'), FAKE_PORTAL.script);
  writeFileSync(path.join(dir, 'assets', 'notes.txt'), 'not an asset type');
  writeFileSync(path.join(dir, 'secret.json'), '{"outside": "assets/"}');
  return dir;
}
