#!/usr/bin/env node
// The `hookline` command. It lives outside dist/ so that it stays executable whatever rebuilds
// dist/ (a compiler writes dist/cli.js without the execute bit, and `npx hookline` would then
// fail with "Permission denied"); it only loads the built CLI.
import { existsSync } from 'node:fs';
import process from 'node:process';
import { URL } from 'node:url';

const cli = new URL('../dist/cli.js', import.meta.url);
if (!existsSync(cli)) {
  process.stderr.write(
    'hookline: the CLI is not built yet; run `npm run build` (or `npm start`) in the checkout first.\n',
  );
  process.exit(1);
}
await import(cli.href);
