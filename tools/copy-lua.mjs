// Copies the stores' Lua scripts (src/store/lua/) to dist/store/lua/, beside the compiled loader
// (dist/store/scripts.js), which reads them from there: tsc emits JavaScript only. `npm run build`
// and `npm start` run it after tsc. A file that already holds the same text is not written again
// (a build with nothing changed writes nothing), and a script no longer in the sources goes.
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const from = path.join(root, 'src/store/lua');
const to = path.join(root, 'dist/store/lua');

/** The files under `dir` (none when it does not exist), as paths relative to it. */
const filesUnder = (dir) =>
  existsSync(dir)
    ? readdirSync(dir, { recursive: true, withFileTypes: true })
        .filter((entry) => entry.isFile())
        .map((entry) => path.relative(dir, path.join(entry.parentPath, entry.name)))
    : [];

const scripts = new Set(filesUnder(from).filter((file) => file.endsWith('.lua')));
for (const file of filesUnder(to)) if (!scripts.has(file)) rmSync(path.join(to, file));
for (const file of scripts) {
  const text = readFileSync(path.join(from, file));
  const target = path.join(to, file);
  if (existsSync(target) && readFileSync(target).equals(text)) continue;
  mkdirSync(path.dirname(target), { recursive: true });
  writeFileSync(target, text);
}
