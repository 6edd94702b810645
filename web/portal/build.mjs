// Builds the vendor portal's browser app (web/portal/src) into dist/portal/: index.html and one
// script and one stylesheet under assets/, named by content hash so the server may let browsers
// cache them for good. `npm run build` runs it; the tests run it into a folder of their own.
// A file whose content did not change is not written again, so a second build writes nothing; and
// when no input changed since the last build (`npm start` with nothing edited), nothing is bundled.
import { Buffer } from 'node:buffer';
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import process from 'node:process';
import { fileURLToPath } from 'node:url';
import { gzipSync } from 'node:zlib';

const here = path.dirname(fileURLToPath(import.meta.url));
const DEFAULT_OUT_DIR = path.resolve(here, '../../dist/portal');

/** Writes `contents` to `file` unless it already holds exactly that; answers whether it wrote. */
function writeIfChanged(file, contents) {
  if (existsSync(file) && readFileSync(file).equals(Buffer.from(contents))) return false;
  mkdirSync(path.dirname(file), { recursive: true });
  writeFileSync(file, contents);
  return true;
}

/** Where a build records what it was made from: not under assets/, and not index.html, so never served. */
const stampOf = (outDir) => path.join(outDir, '.inputs.json');

/** Each file's size and modification time: what the stamp compares. */
const fingerprint = (files) =>
  files.map((file) => {
    const stat = statSync(file, { throwIfNoEntry: false });
    return stat ? [file, stat.size, stat.mtimeMs] : [file];
  });

/**
 * Whether `outDir` holds a build of exactly the current inputs: every file the last bundle read
 * (its sources, preact, the page template, this script) unchanged, and every file it wrote still there.
 * An import of a new file changes the importing file, so the list of inputs cannot go stale unnoticed.
 */
function upToDate(outDir) {
  let stamp;
  try {
    stamp = JSON.parse(readFileSync(stampOf(outDir), 'utf8'));
  } catch {
    return false;
  }
  const inputs = stamp.inputs.map(([file]) => file);
  return (
    JSON.stringify(fingerprint(inputs)) === JSON.stringify(stamp.inputs) &&
    stamp.outputs.every((name) => existsSync(path.join(outDir, name)))
  );
}

/**
 * Bundles the app into `outDir` and answers what it holds: each file's name, size and gzip size.
 * Fails (throws) on any type-free compile error esbuild finds; types are `npm run typecheck`'s job.
 */
export async function buildPortal(outDir = DEFAULT_OUT_DIR) {
  const assetDir = path.join(outDir, 'assets');
  // Loaded here, so that a start with nothing to build does not pay for loading it.
  const esbuild = await import('esbuild');
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
  const inputs = [
    ...Object.keys(result.metafile.inputs).map((file) => path.resolve(file)),
    path.join(here, 'index.html'),
    fileURLToPath(import.meta.url),
  ];
  const written = [...current].map((name) => `assets/${name}`).concat('index.html');
  writeFileSync(stampOf(outDir), `${JSON.stringify({ inputs: fingerprint(inputs), outputs: written })}\n`);

  return [
    ...outputs.map((file) => ({ name: `assets/${file.name}`, contents: file.contents })),
    { name: 'index.html', contents: Buffer.from(index) },
  ].map(({ name, contents }) => ({ name, bytes: contents.length, gzipBytes: gzipSync(contents, { level: 9 }).length }));
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const outDir = process.argv[2] ? path.resolve(process.argv[2]) : DEFAULT_OUT_DIR;
  const shown = path.relative(process.cwd(), outDir) || '.';
  if (upToDate(outDir)) process.stdout.write(`portal: ${shown}: up to date\n`);
  else {
    const files = await buildPortal(outDir);
    const kB = (bytes) => `${(bytes / 1024).toFixed(1)} kB`;
    const listed = files.map((file) => `${file.name} ${kB(file.bytes)} (${kB(file.gzipBytes)} gzip)`).join(', ');
    process.stdout.write(`portal: ${shown}: ${listed}\n`);
  }
}
