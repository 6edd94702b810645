import { existsSync } from 'node:fs';
import { chromium, type Browser } from 'playwright-core';

/** Debian's chromium package (`.ci/run` installs it): playwright-core drives it; no browser is downloaded. */
const CHROMIUM_PATH = '/usr/bin/chromium';

const CHROMIUM_ARGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
  '--no-first-run',
];

/**
 * Why the browser tests cannot run here, or undefined when they can. A workstation without Chromium
 * skips them; CI fails instead (see `.ci/run`), so they never pass by not running.
 */
export function chromiumMissing(): string | undefined {
  if (existsSync(CHROMIUM_PATH)) return undefined;
  if (process.env.CI) throw new Error(`the browser tests need ${CHROMIUM_PATH} in CI (apt-get install chromium)`);
  return `${CHROMIUM_PATH} not found (Debian: apt-get install chromium); skipping the browser tests`;
}

/**
 * A headless Chromium with no background traffic: the only requests are the ones the tests cause.
 * `extraArgs`: switches of one test's own (a host name mapped to 127.0.0.1, say).
 */
export function launchChromium(extraArgs: readonly string[] = []): Promise<Browser> {
  return chromium.launch({ executablePath: CHROMIUM_PATH, headless: true, args: [...CHROMIUM_ARGS, ...extraArgs] });
}
