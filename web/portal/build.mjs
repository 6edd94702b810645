// Builds the vendor portal's browser app (web/portal/src) into dist/portal/: index.html and one
// script and one stylesheet under assets/, named by content hash so the server may let browsers
// cache them for good. `npm run build` runs it; the tests run it into a folder of their own.
// A file whose content did not change is not written again, so a second build writes nothing.
import { Buffer } from 'node:buffer';
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import process from 'node:process';
import { fileURLToPath } from 'node:url';
import { gzipSync } from 'node:zlib';
import * as esbuild from 'esbuild';

const here = path.dirname(fileURLToPath(import.meta.url));
const DEFAULT_OUT_DIR = path.resolve(here, '../../dist/portal');

/** Writes `contents` to `file` unless it already holds exactly that; answers whether it wrote. */
function writeIfChanged(file, contents) {
  if (existsSync(file) && readFileSync(file).equals(Buffer.from(contents))) return false;
  mkdirSync(path.dirname(file), { recursive: true });
  writeFileSync(file, contents);
  return true;
}

/**
 * Bundles the app into `outDir` and answers what it holds: each file's name, size and gzip size.
 * Fails (throws) on any type-free compile error esbuild finds; types are `npm run typecheck`'s job.
 */
export async function buildPortal(outDir = DEFAULT_OUT_DIR) {
  const assetDir = path.join(outDir, 'assets');
  const result = await esbuild.build({
    entryPoints: { app: path.join(here, 'src/main.tsx') },
    bundle: true,
    format: 'esm',
    // Browsers of the last few years: the app uses nothing newer than ES2022.
    target: ['es2022', 'chrome111', 'edge111', 'firefox111', 'safari16'],
    jsx: 'automatic',
    jsxImportSource: 'preact',
    minify: true,
    legalComments: 'none',
    entryNames: '[name]-[hash]',
    outdir: assetDir,
    write: false,
    metafile: true,
    logLevel: 'warning',
  });
  const outputs = result.outputFiles.map((file) => ({ name: path.basename(file.path), contents: file.contents }));
  const script = outputs.find((file) => file.name.endsWith('.js'));
  const stylesheet = outputs.find((file) => file.name.endsWith('.css'));
  if (!script || !stylesheet) throw new Error('the portal build made no script or no stylesheet');
  const index = readFileSync(path.join(here, 'index.html'), 'utf8')
    .replace('%APP_CSS%', `assets/${stylesheet.name}`)
    .replace('%APP_JS%', `assets/${script.name}`);

  for (const file of outputs) writeIfChanged(path.join(assetDir, file.name), file.contents);
  writeIfChanged(path.join(outDir, 'index.html'), index);
  // An earlier build's assets go: the server serves every file it finds here.
  const current = new Set(outputs.map((file) => file.name));
  for (const name of readdirSync(assetDir)) if (!current.has(name)) rmSync(path.join(assetDir, name));

  return [...outputs.map((file) => ({ name: `assets/${file.name}`, contents: file.contents })), { name: 'index.html', contents: Buffer.from(index) }].map(
    ({ name, contents }) => ({ name, bytes: contents.length, gzipBytes: gzipSync(contents, { level: 9 }).length }),
  );
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const outDir = process.argv[2] ? path.resolve(process.argv[2]) : DEFAULT_OUT_DIR;
  const files = await buildPortal(outDir);
  const kB = (bytes) => `${(bytes / 1024).toFixed(1)} kB`;
  const listed = files.map((file) => `${file.name} ${kB(file.bytes)} (${kB(file.gzipBytes)} gzip)`).join(', ');
  process.stdout.write(`portal: ${path.relative(process.cwd(), outDir) || '.'}: ${listed}\n`);
}
