// @ts-check
import js from '@eslint/js';
import { createTypeScriptImportResolver } from 'eslint-import-resolver-typescript';
import importX from 'eslint-plugin-import-x';
import tseslint from 'typescript-eslint';

/**
 * Dependencies point one way, along the data flow (docs/architecture.md "Layout"): each folder of src/ may import
 * only the folders named in `except` (besides itself). domain/ and config/ import nothing else of
 * ours; stores know the domain, never a stage; only the composition root (src/engine/) and the CLI
 * (cli.ts and its helpers in src/cli/) wire stages together, and nothing imports those.
 */
const LAYERS = {
  lib: [],
  domain: [],
  config: [],
  embedded: ['./config'],
  store: ['./domain', './config'],
  ingest: ['./domain', './store', './logger.ts'],
  delivery: ['./domain', './store', './ingest', './logger.ts'],
  // Operator tasks (replays, erasure, retention, test events) queue and read deliveries; delivery never
  // imports them: the composition root hands the worker pool what it runs.
  tasks: ['./domain', './store', './ingest', './delivery', './logger.ts'],
  metrics: ['./domain', './delivery', './ingest', './logger.ts'],
  admin: ['./domain', './store', './ingest', './delivery', './tasks', './metrics', './logger.ts', './version.ts'],
  // The OpenTelemetry adapter behind domain/trace.ts's port: only the composition root loads it.
  tracing: ['./domain', './config'],
};
const layerZones = Object.entries(LAYERS).map(([layer, allowed]) => ({
  target: `./src/${layer}`,
  from: './src',
  // Every layer may use the shared helpers in src/lib/, which import nothing of ours.
  except: [`./${layer}`, ...(layer === 'lib' ? [] : ['./lib']), ...allowed],
  message: `src/${layer}/ may import only ${allowed.length === 0 ? 'itself' : allowed.join(', ')} (docs/architecture.md "Layout")`,
}));
const belowTheCli = [
  ...Object.keys(LAYERS).map((layer) => `./src/${layer}`),
  './src/logger.ts',
  './src/version.ts',
  './src/producer.ts',
  './src/verify.ts',
];
const rootZones = [
  { target: './src', from: './src/cli.ts', message: 'nothing imports the CLI' },
  {
    target: [...belowTheCli, './src/engine'],
    from: './src/cli',
    message: 'src/cli/ holds the CLI’s own helpers: only the CLI imports them',
  },
  { target: belowTheCli, from: './src/engine', message: 'only the CLI imports the composition root' },
  {
    target: './src/delivery/endpoints',
    from: [
      './src/delivery/attempt.ts',
      './src/delivery/single-processor.ts',
      './src/delivery/batch-processor.ts',
      './src/delivery/fifo-driver.ts',
      './src/delivery/worker.ts',
    ],
    message: 'src/delivery/endpoints/ (what is known of endpoints, and admission) imports no delivery run or processor',
  },
  {
    target: './src/delivery/outbound',
    from: './src/delivery',
    except: ['./outbound'],
    message: 'src/delivery/outbound/ (building, signing and sending the request) imports nothing else of src/delivery/',
  },
];

export default tseslint.config(
  { ignores: ['dist/', 'packages/*/dist/', 'node_modules/', '.hookline/', 'bench/results/', 'coverage/'] },
  js.configs.recommended,
  ...tseslint.configs.recommendedTypeChecked,
  {
    languageOptions: {
      parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname },
    },
    rules: {
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      '@typescript-eslint/consistent-type-imports': 'error',
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/require-await': 'off',
      'no-console': 'off',
    },
  },
  {
    files: ['src/**/*.ts'],
    plugins: { 'import-x': importX },
    settings: {
      'import-x/resolver-next': [createTypeScriptImportResolver({ project: './tsconfig.json' })],
      // no-cycle follows imports by parsing the files they name.
      'import-x/parsers': { '@typescript-eslint/parser': ['.ts'] },
      'import-x/extensions': ['.ts'],
    },
    rules: {
      'import-x/no-restricted-paths': ['error', { zones: [...layerZones, ...rootZones] }],
      'import-x/no-cycle': ['error', { ignoreExternal: true }],
    },
  },
  {
    files: ['**/*.js', '**/*.mjs'],
    ...tseslint.configs.disableTypeChecked,
  },
);
