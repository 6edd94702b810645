/**
 * What a bench run is judged by: each scenario's checks, and the targets of the current round
 * (issue 23), which the run prints together at its end whichever scenarios ran.
 */

/** A target and whether this run met it. */
export interface Check {
  target: string;
  value: string;
  /** `undefined`: not judged in this run (a soak too short for the target), printed as such. */
  met: boolean | undefined;
  /** The round's target this check judges, if it is one. */
  key?: TargetKey;
}

/** The round's targets in the order, each judged by a check of the scenario named. */
const TARGETS = [
  { key: 'e2e-over-naive', scenario: 'e2e', text: 'e2e `hookline start` ÷ naive BullMQ worker ≥ 1.50' },
  { key: 'e2e-floor', scenario: 'e2e', text: 'floor: e2e ÷ naive ≥ 1.20' },
  { key: 'cpu-over-lean', scenario: 'e2e', text: 'Hookline CPU per delivery ≤ 1.5 × the lean pipeline’s' },
  { key: 'ingest', scenario: 'ingest', text: 'ingest ÷ raw addBulk ≥ 1.00' },
  {
    key: 'latency-p50',
    scenario: 'latency',
    text: 'latency accepted → received at half the measured maximum: p50 ≤ 5 ms',
  },
  {
    key: 'latency-p99',
    scenario: 'latency',
    text: 'latency accepted → received at half the measured maximum: p99 ≤ 30 ms',
  },
  { key: 'isolation', scenario: 'isolation', text: 'isolation (20 % of webhooks hang): healthy ÷ all-healthy ≥ 0.90' },
  { key: 'flaky-delivered', scenario: 'flaky', text: 'flaky receivers: every event delivered' },
  { key: 'flaky-circuits', scenario: 'flaky', text: 'flaky receivers: no circuit opened' },
  {
    key: 'first-contact',
    scenario: 'first-contact',
    text: 'burst to a first contact: no gap between receptions of 1 s or more',
  },
] as const;

export type TargetKey = (typeof TARGETS)[number]['key'];

/** A scenario's check of one of the round's targets, worded as TARGETS words it. */
export function targetCheck(key: TargetKey, value: string, met: boolean): Check {
  return { key, target: TARGETS.find((t) => t.key === key)!.text, value, met };
}

export function verdictOf(check: Pick<Check, 'met'>): string {
  if (check.met === undefined) return 'not judged';
  return check.met ? 'met' : 'missed';
}

/** What one scenario of the run gave: its checks, or the error that stopped it. */
export interface ScenarioChecks {
  scenario: string;
  checks: readonly Check[] | undefined;
  error: string | undefined;
}

/**
 * Every target of the round as a markdown table (target, this run's figure, met or missed), in the
 * issue's order: a target whose scenario did not run, or failed, says so.
 */
export function targetsTable(ran: readonly ScenarioChecks[]): string[] {
  const rows = TARGETS.map(({ key, scenario, text }) => {
    const outcome = ran.find((r) => r.scenario === scenario);
    const check = outcome?.checks?.find((c) => c.key === key);
    if (check) return `| ${text} | ${check.value} | ${check.met === false ? '**missed**' : verdictOf(check)} |`;
    if (outcome?.error !== undefined) return `| ${text} | ${scenario}: error | not judged |`;
    return `| ${text} | (${scenario} not run) | not judged |`;
  });
  return ['| Target (issue 23) | This run | |', '|---|---|---|', ...rows];
}
