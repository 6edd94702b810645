import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { parse } from 'yaml';

const REPO_ROOT = path.resolve(import.meta.dirname, '../..');
export const GRAFANA_DIR = path.join(REPO_ROOT, 'dashboards/grafana');
export const ALERT_RULES_FILE = path.join(REPO_ROOT, 'dashboards/prometheus/alerts.yml');

/** Series Prometheus makes itself rather than scrapes from Hookline. */
const PROMETHEUS_OWN = new Set([
  'up',
  'scrape_duration_seconds',
  'scrape_samples_scraped',
  'scrape_samples_post_metric_relabeling',
  'scrape_series_added',
  'ALERTS',
  'ALERTS_FOR_STATE',
]);

/** PromQL words that look like names: aggregations and their modifiers, operators, literals. */
const KEYWORDS = new Set([
  'sum',
  'min',
  'max',
  'avg',
  'group',
  'stddev',
  'stdvar',
  'count',
  'count_values',
  'bottomk',
  'topk',
  'quantile',
  'limitk',
  'limit_ratio',
  'by',
  'without',
  'on',
  'ignoring',
  'group_left',
  'group_right',
  'bool',
  'and',
  'or',
  'unless',
  'atan2',
  'offset',
  'inf',
  'nan',
]);

/** Grafana template variables replaced by something PromQL can parse (or removed). */
function withoutGrafanaVariables(expr: string): string {
  return expr.replace(/\$__(rate_interval|interval|range)\b/g, '1m').replace(/\$\{[^}]*\}|\[\[[^\]]*\]\]|\$\w+/g, 'x');
}

/**
 * The metric names one PromQL expression reads. Strings, label matchers (`{…}`), ranges and
 * subqueries (`[…]`), grouping lists (`by (…)`, `on (…)`, …), `offset`/`@` modifiers, numbers,
 * functions (a name before `(`) and keywords are skipped. Histogram and summary series
 * (`_bucket`, `_sum`, `_count`) are reported by their base name, as `# TYPE` lines name them.
 */
export function metricNamesInExpression(expression: string): string[] {
  let expr = withoutGrafanaVariables(expression);
  expr = expr.replace(/#[^\n]*/g, ' '); // comments
  expr = expr.replace(/"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`/g, ' '); // strings
  expr = expr.replace(/\{[^}]*\}/g, ' '); // label matchers
  expr = expr.replace(/\[[^\]]*\]/g, ' '); // ranges and subqueries
  expr = expr.replace(/\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)/g, ' '); // label lists
  expr = expr.replace(/\boffset\s+-?[0-9a-z.]+/gi, ' ').replace(/@\s*[\w.()]+/g, ' '); // modifiers
  const names = new Set<string>();
  // A number (with exponent or duration units, or hex) is consumed whole, so `1e3` or `5m` yields no name.
  const token = /0x[0-9a-f]+|(?:\d+\.?\d*|\.\d+)(?:e[+-]?\d+)?[a-z]*|([a-zA-Z_:][a-zA-Z0-9_:]*)(\s*\()?/gi;
  for (const match of expr.matchAll(token)) {
    const [, name, call] = match;
    if (name === undefined || call !== undefined) continue;
    if (KEYWORDS.has(name.toLowerCase()) || PROMETHEUS_OWN.has(name)) continue;
    names.add(name.replace(/_(bucket|sum|count)$/, ''));
  }
  return [...names];
}

/** Every PromQL expression in a Grafana dashboard: panel targets (rows included) and variable queries. */
export function dashboardExpressions(dashboard: unknown): string[] {
  const found: string[] = [];
  const visit = (node: unknown, key?: string): void => {
    if (Array.isArray(node)) return node.forEach((item) => visit(item));
    if (node === null || typeof node !== 'object') {
      if (typeof node === 'string' && (key === 'expr' || key === 'query' || key === 'definition')) found.push(node);
      return;
    }
    for (const [k, value] of Object.entries(node)) {
      // Variables of type "datasource" hold a plugin id in `query`, not PromQL.
      if (k === 'query' && (node as { type?: unknown }).type === 'datasource') continue;
      visit(value, k);
    }
  };
  const root = dashboard as { panels?: unknown; templating?: unknown };
  visit(root.panels);
  visit(root.templating);
  // `label_values(metric, label)` and friends: keep the metric, drop the label argument.
  return found.map((expr) =>
    expr
      .replace(/\blabel_values\s*\(\s*([^,)]+)(?:,[^)]*)?\)/g, 'label_values($1)')
      .replace(/\bquery_result\s*\(/g, '('),
  );
}

/** Every `expr` of the alerting and recording rules in a Prometheus rules file. */
export function ruleExpressions(rulesYaml: string): string[] {
  const doc = parse(rulesYaml) as { groups?: { rules?: { expr?: unknown }[] }[] } | null;
  return (doc?.groups ?? []).flatMap((group) => (group.rules ?? []).map((rule) => String(rule.expr)));
}

/** The dashboard JSON files under dashboards/grafana (provisioning YAML left out). */
export function dashboardFiles(): string[] {
  return readdirSync(GRAFANA_DIR, { recursive: true, encoding: 'utf8' })
    .filter((file) => file.endsWith('.json'))
    .map((file) => path.join(GRAFANA_DIR, file))
    .sort();
}

/**
 * Every metric name the Grafana dashboards and the Prometheus alert rules query, sorted and
 * without repeats: histogram series by their base name, Prometheus's own `up` left out.
 */
export function metricNamesUsedInDashboards(): string[] {
  const expressions = [
    ...dashboardFiles().flatMap((file) => dashboardExpressions(JSON.parse(readFileSync(file, 'utf8')))),
    ...ruleExpressions(readFileSync(ALERT_RULES_FILE, 'utf8')),
  ];
  return [...new Set(expressions.flatMap(metricNamesInExpression))].sort();
}
