import type { Webhook } from '../domain/webhook.js';
import type { CircuitView, RedisCircuitLog } from './circuits.js';
import type { DeliveryHistory, DeliverySummary, WebhookDeliveryHealth } from './delivery-log.js';
import type { RedisWebhookStore } from './webhooks.js';

/** Where a webhook stands, most urgent first: what the operator views sort and filter by. */
export const WEBHOOK_STATES = ['disabled', 'circuit_open', 'failing', 'healthy', 'paused'] as const;
export type WebhookState = (typeof WEBHOOK_STATES)[number];

/** A webhook with what an operator needs to judge it. */
export interface WebhookStatus extends WebhookDeliveryHealth {
  webhook: Webhook;
  /**
   * disabled: the engine disabled it (410 Gone, or failing for the sustained-failure window);
   * circuit_open: a worker holds deliveries to its endpoint back; failing: its last attempts failed;
   * paused: its vendor paused it; healthy: none of these.
   */
  state: WebhookState;
  /** Disabled by the engine, circuit open, failing, or holding dead letters. */
  needsAttention: boolean;
  circuit: CircuitView | undefined;
}

export interface WebhookFilter {
  vendorId?: string;
  states?: readonly WebhookState[];
  needsAttention?: boolean;
}

function stateOf(webhook: Webhook, health: WebhookDeliveryHealth, circuit: CircuitView | undefined): WebhookState {
  if (webhook.disabled) return webhook.disabled.reason === 'paused' ? 'paused' : 'disabled';
  if (circuit) return 'circuit_open';
  return health.failingSinceMs === undefined ? 'healthy' : 'failing';
}

/** Most urgent first: by state, then more dead letters, then the longer failure run, then age. */
function urgency(a: WebhookStatus, b: WebhookStatus): number {
  const rank = (s: WebhookStatus) =>
    s.state === 'healthy' && s.deadLetters > 0 ? 2.5 : WEBHOOK_STATES.indexOf(s.state);
  return (
    rank(a) - rank(b) ||
    b.deadLetters - a.deadLetters ||
    (a.failingSinceMs ?? Infinity) - (b.failingSinceMs ?? Infinity) ||
    a.webhook.createdAt.localeCompare(b.webhook.createdAt) ||
    a.webhook.id.localeCompare(b.webhook.id)
  );
}

/**
 * The operator's views across vendors: every webhook with its state, failing ones first, and dead
 * letters across webhooks. Reads per webhook are one round trip each (auto-pipelined), so a view of
 * thousands of webhooks stays well under a second.
 */
export class OperatorViews {
  constructor(
    private readonly deps: {
      webhooks: Pick<RedisWebhookStore, 'listAll' | 'list' | 'getById'>;
      history: Pick<DeliveryHistory, 'health' | 'deadLetters'>;
      circuits: Pick<RedisCircuitLog, 'of'>;
    },
  ) {}

  async webhooks(filter: WebhookFilter = {}): Promise<WebhookStatus[]> {
    const webhooks =
      filter.vendorId === undefined
        ? await this.deps.webhooks.listAll()
        : await this.deps.webhooks.list(filter.vendorId);
    const statuses = await this.statusesOf(webhooks);
    return statuses
      .filter(
        (s) =>
          (filter.states === undefined || filter.states.includes(s.state)) &&
          (filter.needsAttention !== true || s.needsAttention),
      )
      .sort(urgency);
  }

  /** One webhook's status, whoever owns it; undefined when there is no such webhook. */
  async webhook(webhookId: string): Promise<WebhookStatus | undefined> {
    const webhook = await this.deps.webhooks.getById(webhookId);
    return webhook && (await this.statusesOf([webhook]))[0];
  }

  /** The newest dead letters of one webhook, a vendor's webhooks, or all, newest first. */
  async deadLetters(filter: { vendorId?: string; webhookId?: string; limit: number }): Promise<DeliverySummary[]> {
    let ids: string[];
    if (filter.webhookId !== undefined) ids = [filter.webhookId];
    else {
      const webhooks =
        filter.vendorId === undefined
          ? await this.deps.webhooks.listAll()
          : await this.deps.webhooks.list(filter.vendorId);
      const health = await this.deps.history.health(webhooks.map((w) => w.id));
      ids = webhooks.filter((_, i) => (health[i]?.deadLetters ?? 0) > 0).map((w) => w.id);
    }
    const lists = await Promise.all(ids.map((id) => this.deps.history.deadLetters(id, filter.limit)));
    return lists
      .flat()
      .sort((a, b) => b.updatedAtMs - a.updatedAtMs || a.deliveryId.localeCompare(b.deliveryId))
      .slice(0, filter.limit);
  }

  private async statusesOf(webhooks: readonly Webhook[]): Promise<WebhookStatus[]> {
    const ids = webhooks.map((w) => w.id);
    const [health, circuits] = await Promise.all([this.deps.history.health(ids), this.deps.circuits.of(ids)]);
    return webhooks.map((webhook, i) => {
      const h = health[i] ?? { failingSinceMs: undefined, deadLetters: 0, last: undefined };
      const circuit = circuits[i];
      const state = stateOf(webhook, h, circuit);
      return {
        webhook,
        ...h,
        circuit,
        state,
        needsAttention: (state !== 'healthy' && state !== 'paused') || h.deadLetters > 0,
      };
    });
  }
}
