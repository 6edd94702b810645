import { existsSync, readFileSync, readdirSync, statSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';

const root = path.resolve(import.meta.dirname, '../..');
const SKIP = new Set(['node_modules', 'dist', '.git', 'results']);

/** Every Markdown file of the repository that a reader opens: the README, docs/, the guides beside them, examples' and packages' READMEs. */
function markdownFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    if (SKIP.has(name)) return [];
    const full = path.join(dir, name);
    if (statSync(full).isDirectory()) return markdownFiles(full);
    return name.endsWith('.md') ? [full] : [];
  });
}

/** GitHub's anchor for a heading: lowercase, punctuation dropped, spaces to hyphens. */
function anchorOf(heading: string): string {
  return heading
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{N}\- _]/gu, '')
    .replaceAll(' ', '-');
}

/** The text outside fenced code blocks, where a link is a link. */
function prose(text: string): string {
  return text.replace(/^```[\s\S]*?^```/gm, '');
}

function anchorsOf(file: string): Set<string> {
  const headings = [...prose(readFileSync(file, 'utf8')).matchAll(/^#{1,6} (.+)$/gm)].map((m) => anchorOf(m[1] ?? ''));
  return new Set(headings);
}

const files = markdownFiles(root);

describe('documentation links', () => {
  it('finds the documents', () => {
    const names = files.map((file) => path.relative(root, file));
    expect(names).toEqual(
      expect.arrayContaining(['README.md', 'CONTRIBUTING.md', 'SECURITY.md', 'bench/RESULTS.md', 'docs/api.md']),
    );
  });

  it.each(files.map((file) => [path.relative(root, file), file]))(
    'every relative link in %s resolves, anchors included',
    (_name, file) => {
      const broken: string[] = [];
      for (const match of prose(readFileSync(file, 'utf8')).matchAll(/\]\(([^)\s]+)\)/g)) {
        const target = match[1] ?? '';
        if (/^[a-z][a-z+.-]*:/i.test(target)) continue; // https:, mailto: and the like
        const [linkPath = '', anchor] = target.split('#');
        const resolved = linkPath === '' ? file : path.resolve(path.dirname(file), decodeURIComponent(linkPath));
        if (!existsSync(resolved)) {
          broken.push(`${target} (no such file)`);
          continue;
        }
        if (anchor !== undefined && resolved.endsWith('.md') && !anchorsOf(resolved).has(anchor))
          broken.push(`${target} (no such heading)`);
      }
      expect(broken).toEqual([]);
    },
  );
});
