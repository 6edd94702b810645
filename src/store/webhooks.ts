import { z } from 'zod';
import { WEBHOOK_EVENT_TYPES, type WebhookEventType } from '../domain/events.js';
import { newId } from '../domain/ids.js';
import {
  KEY_PUBLISH_LEAD_MS,
  keyNumber,
  newSigningKey,
  publishedKeysAt,
  SIGNATURE_SCHEMES,
  signingKeysAt,
  type SignatureScheme,
  type SigningKey,
} from '../domain/signing-keys.js';
import type { FilterNode } from '../domain/filter.js';
import {
  credentialsToRestate,
  headersAuthProblem,
  headersProblem,
  TOKEN_AUTH_METHODS,
  type ClientCertificate,
  type ReceiverAuth,
} from '../domain/receiver-auth.js';
import type { DeliveryShape } from '../domain/field-selection.js';
import {
  DISABLED_REASONS,
  newWebhookSecret,
  ORDERING_KEY_NEEDS_FIFO,
  type DisabledReason,
  type RetryPolicy,
  type WebhookPriority,
  type Webhook,
  type WebhookOrdering,
} from '../domain/webhook.js';
import type { RedisKeys } from './keys.js';
import type { Redis } from './redis.js';
import { defineScriptFile, type ScriptCall } from './scripts.js';
import type { SecretBox } from './secret-box.js';
import type { WebhookChange } from './webhook-changes.js';

const recordSchema = z.object({
  id: z.string(),
  vendorId: z.string(),
  eventType: z.enum(WEBHOOK_EVENT_TYPES),
  callbackUrl: z.string(),
  secretSealed: z.string().optional(),
  previousSecretSealed: z.string().optional(),
  previousSecretUntilMs: z.number().optional(),
  disabledReason: z.enum(DISABLED_REASONS).optional(),
  disabledAtMs: z.number().optional(),
  rateLimitPerSecond: z.number().optional(),
  signature: z.enum(SIGNATURE_SCHEMES).optional(),
  /** Ed25519 key pairs, the newest first; private keys sealed like secrets; `kid` is `<webhook id>.<n>`, never shown (see publicKid). */
  signingKeys: z
    .array(
      z.object({
        kid: z.string(),
        publicKey: z.string(),
        privateSealed: z.string(),
        createdAtMs: z.number(),
        fromMs: z.number().optional(),
        untilMs: z.number().optional(),
      }),
    )
    .optional(),
  /** Checked when it was stored (parseFilter); kept as given. */
  filter: z.custom<FilterNode>((value) => typeof value === 'object' && value !== null).optional(),
  ordering: z.literal('fifo').optional(),
  /** Only beside `ordering: fifo` (orderingProblem). */
  orderingKey: z.string().optional(),
  maxConcurrency: z.number().optional(),
  retentionMs: z.number().optional(),
  /** Checked against the installation's schedule when it was stored (retryPolicyProblem). */
  retry: z.object({ scheduleMs: z.array(z.number()).optional(), maxAgeMs: z.number().optional() }).optional(),
  /** Checked when it was stored (includeFieldProblem). */
  includeFields: z.array(z.string()).optional(),
  priority: z.literal('high').optional(),
  propagateTrace: z.literal(true).optional(),
  /** Custom headers: the names in the clear (reads need no key), the [name, value] pairs sealed together. */
  headerNames: z.array(z.string()).optional(),
  headersSealed: z.string().optional(),
  /** Receiver auth: its non-secret fields, and its one secret (password, token or client secret) sealed. */
  auth: z
    .object({
      type: z.enum(['basic', 'bearer', 'oauth2_client_credentials']),
      username: z.string().optional(),
      tokenUrl: z.string().optional(),
      clientId: z.string().optional(),
      scope: z.string().optional(),
      audience: z.string().optional(),
      tokenAuthMethod: z.enum(TOKEN_AUTH_METHODS).optional(),
      secretSealed: z.string(),
    })
    .optional(),
  /** TLS client certificate: the certificate and what reads show of it in the clear, the key sealed. */
  clientCert: z
    .object({
      certPem: z.string(),
      keySealed: z.string(),
      subject: z.string(),
      issuer: z.string(),
      fingerprint256: z.string(),
      notAfterMs: z.number(),
    })
    .optional(),
  createdAt: z.string(),
  updatedAt: z.string(),
});

type WebhookRecord = z.infer<typeof recordSchema>;

/** The disable reasons the engine sets itself (a vendor's own pause is `paused`). */
export type EngineDisabledReason = Exclude<DisabledReason, 'paused'>;

/**
 * A webhook entering or leaving a disable the engine made (410 Gone, sustained failure), told once:
 * by the writer whose compare-and-set made the change, so two workers that both saw a 410, or two
 * PATCHes that both re-enabled, tell it once between them. A vendor's own pause is neither.
 */
export type WebhookTransition =
  | { kind: 'disabled'; webhook: Webhook; reason: EngineDisabledReason; atMs: number }
  | { kind: 'recovered'; webhook: Webhook; reason: EngineDisabledReason; disabledAtMs: number; atMs: number };

/** Told of each transition once it is stored; it reports its own failures and never throws. */
export type TransitionListener = (transition: WebhookTransition) => Promise<void>;

export type CreateResult =
  | { ok: true; webhook: Webhook }
  | { ok: false; reason: 'conflict'; existingId: string }
  | { ok: false; reason: 'invalid'; problem: string };
/**
 * `unsigned`: the change would leave a webhook that signs with hmac without a secret (see applyChanges);
 * `invalid`: the webhook it would leave breaks a rule across fields (`problem` says which);
 * `credentials_not_restated`: it moves the callback URL to another origin, where these stored
 * credentials would go unless restated (see credentialsToRestate).
 */
export type UpdateResult =
  | { ok: true; webhook: Webhook }
  | { ok: false; reason: 'not_found' | 'conflict' | 'unsigned' }
  | { ok: false; reason: 'invalid'; problem: string }
  | { ok: false; reason: 'credentials_not_restated'; headers: string[]; auth: boolean };

export interface WebhookChanges {
  eventType?: WebhookEventType;
  callbackUrl?: string;
  /**
   * A different secret starts a rotation: the old one keeps signing for the overlap period; null removes the secret at once
   * (refused, `unsigned`, unless the webhook signs with ed25519 after the change).
   */
  secret?: string | null;
  /** true re-enables; false pauses (reason `paused`). */
  enabled?: boolean;
  /** A new send rate limit; null removes it. */
  rateLimitPerSecond?: number | null;
  /** ed25519 generates a key pair when the webhook has none; hmac drops its keys, and generates a secret when it has none. */
  signature?: SignatureScheme;
  /** A new Ed25519 key pair; the current one keeps signing beside it for the overlap period. */
  rotateSigningKey?: boolean;
  /** A new payload filter; null removes it. */
  filter?: FilterNode | null;
  ordering?: WebhookOrdering;
  /** A new ordering key (checked by the caller); null removes it. */
  orderingKey?: string | null;
  /** A new ceiling of attempts in flight; null removes it. */
  maxConcurrency?: number | null;
  /** A new retention (ms); null returns to the installation's. */
  retentionMs?: number | null;
  /** A new retry policy (checked by the caller); null returns to the installation's schedule. */
  retry?: RetryPolicy | null;
  /** New paths of data to send; null sends every field. */
  includeFields?: string[] | null;
  priority?: WebhookPriority;
  propagateTrace?: boolean;
  /** Merged into the custom headers (names case-insensitive): a value sets one, null removes one; null removes them all. */
  headers?: Record<string, string | null> | null;
  /** New receiver auth; null removes it. */
  auth?: ReceiverAuth | null;
  /** A new client certificate (checked by the caller); null removes it. */
  clientCertificate?: ClientCertificate | null;
}

/** What a registration sets. */
export interface WebhookInput {
  eventType: WebhookEventType;
  callbackUrl: string;
  /** Absent: a webhook signing with hmac gets a generated one (the created webhook carries it). */
  secret?: string;
  rateLimitPerSecond?: number;
  signature?: SignatureScheme;
  filter?: FilterNode;
  ordering?: WebhookOrdering;
  /** Checked by the caller (orderingKeyProblem); only with `ordering: fifo`. */
  orderingKey?: string;
  maxConcurrency?: number;
  retentionMs?: number;
  /** Checked by the caller (retryPolicyProblem). */
  retry?: RetryPolicy;
  includeFields?: string[];
  priority?: WebhookPriority;
  propagateTrace?: boolean;
  headers?: Record<string, string>;
  auth?: ReceiverAuth;
  /** Checked by the caller (checkClientCertificate). */
  clientCertificate?: ClientCertificate;
}

/** What the delivery worker needs: any webhook by id, and a way to disable one. */
export interface WebhookSource {
  getById(webhookId: string): Promise<Webhook | undefined>;
  /** The webhook as stored now, past (and replacing) any copy the process keeps. */
  getFresh(webhookId: string): Promise<Webhook | undefined>;
  disable(webhookId: string, reason: EngineDisabledReason): Promise<boolean>;
}

/** The vendor-scoped webhook registry the admin routes use. Another vendor's webhook is "not found". */
export interface WebhookRegistry {
  create(vendorId: string, input: WebhookInput): Promise<CreateResult>;
  list(vendorId: string): Promise<Webhook[]>;
  get(vendorId: string, webhookId: string): Promise<Webhook | undefined>;
  update(vendorId: string, webhookId: string, changes: WebhookChanges): Promise<UpdateResult>;
  delete(vendorId: string, webhookId: string): Promise<boolean>;
  /** Every webhook's Ed25519 public keys published at `nowMs` (the key set document), by opaque kid; no private key is opened. */
  publicSigningKeys(nowMs: number): Promise<PublicSigningKey[]>;
}

/** A public key of a webhook signing with Ed25519. */
export type PublicSigningKey = Omit<SigningKey, 'privateKey'> & { webhookId: string };

// The scripts' KEYS: the registry's hashes, a vendor's set, the FIFO set and the ordering keys, all under the webhooks hash tag.
type VendorKeys = [byId: string, byVendorType: string, ofVendor: string, fifo: string, orderingKeys: string];
type UpdateKeys = [byId: string, byVendorType: string, fifo: string, orderingKeys: string];

const indexField = (vendorId: string, eventType: string) => `${vendorId}\n${eventType}`;

/** What a sealed receiver credential is bound to: its webhook and its field, so it opens nowhere else. */
const sealedFor = (webhookId: string, field: 'headers' | 'auth' | 'client key') => `${webhookId}\n${field}`;

/** `current` with `patch` merged in (names case-insensitive; a name given anew takes the new spelling); null removes. */
function mergeHeaders(current: [string, string][], patch: Record<string, string | null>): [string, string][] {
  const merged = [...current];
  for (const [name, value] of Object.entries(patch)) {
    const at = merged.findIndex(([existing]) => existing.toLowerCase() === name.toLowerCase());
    if (value === null) {
      if (at >= 0) merged.splice(at, 1);
    } else if (at >= 0) merged[at] = [name, value];
    else merged.push([name, value]);
  }
  return merged;
}
const CAS_ATTEMPTS = 8;

/** The problem of a record whose ordering key is not beside `ordering: fifo`, or undefined. */
function orderingProblem(record: WebhookRecord): string | undefined {
  return record.orderingKey !== undefined && record.ordering !== 'fifo' ? ORDERING_KEY_NEEDS_FIFO : undefined;
}

/**
 * Webhooks in Redis under one hash tag; secrets sealed with AES-256-GCM bound to the webhook id. It
 * also answers ingest's SubscriptionLookup (`matchMany`): the composition root checks that fit, so
 * the store needs nothing from the ingest stage.
 */
export class RedisWebhookStore implements WebhookRegistry, WebhookSource {
  /** The id holding the (vendor, event type) already, or null once created. */
  private readonly createScript: ScriptCall<
    VendorKeys,
    [id: string, field: string, json: string, ordering: WebhookOrdering, orderingKey: string],
    string | null
  >;
  /** 'ok', 'not_found', 'changed' (the record moved since it was read) or 'conflict'. */
  private readonly updateScript: ScriptCall<
    UpdateKeys,
    [
      id: string,
      expected: string,
      next: string,
      oldField: string,
      newField: string,
      ordering: WebhookOrdering,
      orderingKey: string,
    ],
    string
  >;
  /** 1 when deleted, 0 when absent or another vendor's. */
  private readonly deleteScript: ScriptCall<VendorKeys, [id: string, vendorId: string], number>;
  private readonly listScript: ScriptCall<[byId: string, ofVendor: string], [], (string | null)[]>;
  private readonly matchScript: ScriptCall<
    [byVendorType: string, fifo: string, orderingKeys: string],
    string[],
    ([webhookId: string, fifo: number, orderingKey?: string] | null)[]
  >;

  constructor(
    private readonly redis: Redis,
    private readonly keys: RedisKeys,
    private readonly box: SecretBox,
    private readonly now: () => Date = () => new Date(),
    /** How long a replaced secret keeps signing beside the new one. */
    private readonly rotationOverlapMs: number = 24 * 3_600_000,
    /** Told when the engine disables a webhook and when such a webhook is enabled again. */
    private readonly onTransition?: TransitionListener,
    /** Told of every stored change of a webhook (create, update, disable, delete), before the call answers: caches drop their copies. */
    private readonly onChange?: (change: WebhookChange) => void,
    /**
     * Told, before the call answers, when a webhook is enabled (every time, so that an enable repeated
     * after a failure still brings them back) or deleted: the deliveries held for its pause go now.
     */
    private readonly releaseHeld?: (webhookId: string) => Promise<void>,
  ) {
    this.createScript = defineScriptFile(redis, 'webhooks-create', 5);
    this.updateScript = defineScriptFile(redis, 'webhooks-update', 4);
    this.deleteScript = defineScriptFile(redis, 'webhooks-delete', 5);
    this.matchScript = defineScriptFile(redis, 'webhooks-match', 3);
    this.listScript = defineScriptFile(redis, 'webhooks-list', 2);
  }

  async create(vendorId: string, input: WebhookInput): Promise<CreateResult> {
    const id = newId();
    const at = this.now().toISOString();
    // An hmac webhook without a secret would go out unsigned; an ed25519 one is signed by its key pair.
    const secret = input.secret ?? (input.signature === 'ed25519' ? undefined : newWebhookSecret());
    const record: WebhookRecord = {
      id,
      vendorId,
      eventType: input.eventType,
      callbackUrl: input.callbackUrl,
      ...(secret === undefined ? {} : { secretSealed: this.box.seal(secret, id) }),
      ...(input.rateLimitPerSecond === undefined ? {} : { rateLimitPerSecond: input.rateLimitPerSecond }),
      ...(input.filter === undefined ? {} : { filter: input.filter }),
      ...(input.signature === 'ed25519'
        ? { signature: 'ed25519' as const, signingKeys: [this.sealKey(newSigningKey(id, 1, Date.parse(at)), id)] }
        : {}),
      ...(input.ordering === 'fifo' ? { ordering: 'fifo' as const } : {}),
      ...(input.orderingKey === undefined ? {} : { orderingKey: input.orderingKey }),
      ...(input.maxConcurrency === undefined ? {} : { maxConcurrency: input.maxConcurrency }),
      ...(input.retentionMs === undefined ? {} : { retentionMs: input.retentionMs }),
      ...(input.retry === undefined ? {} : { retry: input.retry }),
      ...(input.includeFields === undefined ? {} : { includeFields: input.includeFields }),
      ...(input.priority === 'high' ? { priority: 'high' as const } : {}),
      ...(input.propagateTrace === true ? { propagateTrace: true as const } : {}),
      createdAt: at,
      updatedAt: at,
    };
    const problem =
      orderingProblem(record) ??
      this.applyReceiverChanges(record, {
        ...(input.headers === undefined ? {} : { headers: input.headers }),
        ...(input.auth === undefined ? {} : { auth: input.auth }),
        ...(input.clientCertificate === undefined ? {} : { clientCertificate: input.clientCertificate }),
      });
    if (problem !== undefined) return { ok: false, reason: 'invalid', problem };
    const { byId, byVendorType, ofVendor, fifo, orderingKeys } = this.keys.webhooks;
    const holder = await this.createScript(
      [byId, byVendorType, ofVendor(vendorId), fifo, orderingKeys],
      id,
      indexField(vendorId, input.eventType),
      JSON.stringify(record),
      record.ordering ?? 'none',
      record.orderingKey ?? '',
    );
    if (holder !== null) return { ok: false, reason: 'conflict', existingId: holder };
    this.onChange?.({ webhookId: id, vendorId });
    return { ok: true, webhook: this.toWebhook(record) };
  }

  async list(vendorId: string): Promise<Webhook[]> {
    const rows = await this.listScript([this.keys.webhooks.byId, this.keys.webhooks.ofVendor(vendorId)]);
    return rows
      .filter((row): row is string => row !== null)
      .map((row) => this.toWebhook(recordSchema.parse(JSON.parse(row))))
      .sort((a, b) => a.createdAt.localeCompare(b.createdAt) || a.id.localeCompare(b.id));
  }

  /** Every vendor's webhooks (operator views), oldest first; read in pages of the registry hash. */
  async listAll(): Promise<Webhook[]> {
    const found: Webhook[] = [];
    let cursor = '0';
    do {
      const [next, flat] = await this.redis.hscan(this.keys.webhooks.byId, cursor, 'COUNT', 500);
      for (let i = 1; i < flat.length; i += 2) found.push(this.toWebhook(recordSchema.parse(JSON.parse(flat[i]!))));
      cursor = next;
    } while (cursor !== '0');
    return found.sort((a, b) => a.createdAt.localeCompare(b.createdAt) || a.id.localeCompare(b.id));
  }

  async publicSigningKeys(nowMs: number): Promise<PublicSigningKey[]> {
    const found: PublicSigningKey[] = [];
    let cursor = '0';
    do {
      const [next, flat] = await this.redis.hscan(this.keys.webhooks.byId, cursor, 'COUNT', 500);
      for (let i = 1; i < flat.length; i += 2) {
        const record = recordSchema.parse(JSON.parse(flat[i]!));
        if (record.signature !== 'ed25519') continue;
        for (const { privateSealed: _sealed, ...key } of publishedKeysAt(record.signingKeys ?? [], nowMs)) {
          found.push({ ...key, kid: this.publicKid(key.kid), webhookId: record.id });
        }
      }
      cursor = next;
    } while (cursor !== '0');
    return found.sort((a, b) => a.kid.localeCompare(b.kid));
  }

  /** Each webhook's payload filter (undefined: none, or no such webhook), in one round trip; no secret is opened. */
  async shapesOf(webhookIds: readonly string[]): Promise<(DeliveryShape | undefined)[]> {
    if (webhookIds.length === 0) return [];
    const rows = await this.redis.hmget(this.keys.webhooks.byId, ...webhookIds);
    return rows.map((row) => {
      if (row === null) return undefined;
      const { filter, includeFields } = recordSchema.parse(JSON.parse(row));
      return { filter, includeFields };
    });
  }

  async get(vendorId: string, webhookId: string): Promise<Webhook | undefined> {
    const found = await this.readRecord(vendorId, webhookId);
    return found && this.toWebhook(found.record);
  }

  async update(vendorId: string, webhookId: string, changes: WebhookChanges): Promise<UpdateResult> {
    for (let attempt = 0; attempt < CAS_ATTEMPTS; attempt += 1) {
      const found = await this.readRecord(vendorId, webhookId);
      if (!found) return { ok: false, reason: 'not_found' };
      const { record, raw } = found;
      const next = this.applyChanges(record, changes);
      if (next === 'unsigned') return { ok: false, reason: 'unsigned' };
      if ('problem' in next) return { ok: false, reason: 'invalid', problem: next.problem };
      if ('restate' in next) return { ok: false, reason: 'credentials_not_restated', ...next.restate };
      const outcome = await this.updateScript(
        this.updateKeys(),
        webhookId,
        raw,
        JSON.stringify(next),
        indexField(vendorId, record.eventType),
        indexField(vendorId, next.eventType),
        next.ordering ?? 'none',
        next.orderingKey ?? '',
      );
      if (outcome === 'ok') {
        this.onChange?.({ webhookId, vendorId });
        // Re-enabled: the run of failures that may have disabled it starts over (another hash tag,
        // so a second command; losing it only means one more failure could disable it again early).
        if (changes.enabled === true) await this.redis.del(this.keys.deliveries.failingSince(webhookId));
        const webhook = this.toWebhook(next);
        // This write replaced the very record that held the engine's disable (compare-and-set), so
        // no other writer can also see itself ending it.
        const ended = record.disabledReason;
        if (ended !== undefined && ended !== 'paused' && next.disabledReason === undefined) {
          await this.onTransition?.({
            kind: 'recovered',
            webhook,
            reason: ended,
            disabledAtMs: record.disabledAtMs ?? 0,
            atMs: Date.parse(next.updatedAt),
          });
        }
        // Last: the deliveries it brings back must meet the failure run started over.
        if (changes.enabled === true) await this.releaseHeld?.(webhookId);
        return { ok: true, webhook };
      }
      if (outcome === 'not_found' || outcome === 'conflict') return { ok: false, reason: outcome };
      // 'changed': another writer got there first; read again and re-apply the patch.
    }
    throw new Error(`webhook ${webhookId} kept changing during update`);
  }

  async matchMany(
    pairs: readonly { vendorId: string; eventType: WebhookEventType }[],
  ): Promise<({ webhookId: string; fifo: boolean; orderingKey?: string } | undefined)[]> {
    if (pairs.length === 0) return [];
    const { byVendorType, fifo, orderingKeys } = this.keys.webhooks;
    const found = await this.matchScript(
      [byVendorType, fifo, orderingKeys],
      ...pairs.map((p) => indexField(p.vendorId, p.eventType)),
    );
    return found.map((match) =>
      match === null
        ? undefined
        : {
            webhookId: match[0],
            fifo: match[1] === 1,
            ...(match[2] === undefined ? {} : { orderingKey: match[2] }),
          },
    );
  }

  async getById(webhookId: string): Promise<Webhook | undefined> {
    const raw = await this.redis.hget(this.keys.webhooks.byId, webhookId);
    return raw === null ? undefined : this.toWebhook(recordSchema.parse(JSON.parse(raw)));
  }

  getFresh(webhookId: string): Promise<Webhook | undefined> {
    return this.getById(webhookId);
  }

  /**
   * Disables a webhook (410 Gone, sustained failures); false when it is gone or already disabled, so
   * true comes back to one caller only however many disable it at once.
   */
  async disable(webhookId: string, reason: EngineDisabledReason): Promise<boolean> {
    for (let attempt = 0; attempt < CAS_ATTEMPTS; attempt += 1) {
      const raw = await this.redis.hget(this.keys.webhooks.byId, webhookId);
      if (raw === null) return false;
      const record = recordSchema.parse(JSON.parse(raw));
      if (record.disabledReason !== undefined) return false;
      const now = this.now();
      const next: WebhookRecord = {
        ...record,
        disabledReason: reason,
        disabledAtMs: now.getTime(),
        updatedAt: now.toISOString(),
      };
      const field = indexField(record.vendorId, record.eventType);
      const outcome = await this.updateScript(
        this.updateKeys(),
        webhookId,
        raw,
        JSON.stringify(next),
        field,
        field,
        next.ordering ?? 'none',
        next.orderingKey ?? '',
      );
      if (outcome === 'ok') {
        this.onChange?.({ webhookId, vendorId: record.vendorId });
        await this.onTransition?.({ kind: 'disabled', webhook: this.toWebhook(next), reason, atMs: now.getTime() });
        return true;
      }
      if (outcome === 'not_found') return false;
    }
    throw new Error(`webhook ${webhookId} kept changing while being disabled`);
  }

  async delete(vendorId: string, webhookId: string): Promise<boolean> {
    const { byId, byVendorType, ofVendor, fifo, orderingKeys } = this.keys.webhooks;
    const deleted =
      (await this.deleteScript([byId, byVendorType, ofVendor(vendorId), fifo, orderingKeys], webhookId, vendorId)) ===
      1;
    if (deleted) {
      this.onChange?.({ webhookId, vendorId });
      // Dropped now rather than when their holds end.
      await this.releaseHeld?.(webhookId);
    }
    return deleted;
  }

  private updateKeys(): UpdateKeys {
    const { byId, byVendorType, fifo, orderingKeys } = this.keys.webhooks;
    return [byId, byVendorType, fifo, orderingKeys];
  }

  private async readRecord(
    vendorId: string,
    webhookId: string,
  ): Promise<{ record: WebhookRecord; raw: string } | undefined> {
    const raw = await this.redis.hget(this.keys.webhooks.byId, webhookId);
    if (raw === null) return undefined;
    const record = recordSchema.parse(JSON.parse(raw));
    return record.vendorId === vendorId ? { record, raw } : undefined;
  }

  /**
   * The record after a PATCH: a new secret rotates, `enabled` toggles the pause. A webhook that signs
   * with hmac afterwards keeps a secret: removing it is refused (`unsigned`), and a switch to hmac
   * without one generates one. One stored without a secret before secrets were generated is left as
   * it is by other changes: signing it unasked would fail receivers that verify what they get. A
   * callback URL moved to another origin is refused (`restate`) while stored credentials would
   * follow it unrestated; judged against the record this compare-and-set read, so a header another
   * request added meanwhile is counted too.
   */
  private applyChanges(
    record: WebhookRecord,
    changes: WebhookChanges,
  ): WebhookRecord | 'unsigned' | { problem: string } | { restate: { headers: string[]; auth: boolean } } {
    const restate =
      changes.callbackUrl === undefined
        ? undefined
        : credentialsToRestate(
            record.callbackUrl,
            changes.callbackUrl,
            { headerNames: record.headerNames ?? [], hasAuth: record.auth !== undefined },
            changes,
          );
    if (restate !== undefined) return { restate };
    const now = this.now();
    const next: WebhookRecord = {
      ...record,
      ...(changes.eventType === undefined ? {} : { eventType: changes.eventType }),
      ...(changes.callbackUrl === undefined ? {} : { callbackUrl: changes.callbackUrl }),
      updatedAt: now.toISOString(),
    };
    if (changes.ordering === 'fifo') next.ordering = 'fifo';
    else if (changes.ordering === 'none') delete next.ordering;
    if (changes.orderingKey === null) delete next.orderingKey;
    else if (changes.orderingKey !== undefined) next.orderingKey = changes.orderingKey;
    if (changes.rateLimitPerSecond === null) delete next.rateLimitPerSecond;
    else if (changes.rateLimitPerSecond !== undefined) next.rateLimitPerSecond = changes.rateLimitPerSecond;
    if (changes.maxConcurrency === null) delete next.maxConcurrency;
    else if (changes.maxConcurrency !== undefined) next.maxConcurrency = changes.maxConcurrency;
    if (changes.retentionMs === null) delete next.retentionMs;
    else if (changes.retentionMs !== undefined) next.retentionMs = changes.retentionMs;
    if (changes.retry === null) delete next.retry;
    else if (changes.retry !== undefined) next.retry = changes.retry;
    if (changes.includeFields === null) delete next.includeFields;
    else if (changes.includeFields !== undefined) next.includeFields = changes.includeFields;
    if (changes.priority === 'high') next.priority = 'high';
    else if (changes.priority === 'normal') delete next.priority;
    if (changes.propagateTrace === true) next.propagateTrace = true;
    else if (changes.propagateTrace === false) delete next.propagateTrace;
    if (changes.secret === null) {
      delete next.secretSealed;
      delete next.previousSecretSealed;
      delete next.previousSecretUntilMs;
    } else if (changes.secret !== undefined) {
      const current = record.secretSealed === undefined ? undefined : this.box.open(record.secretSealed, record.id);
      if (current !== changes.secret) {
        next.secretSealed = this.box.seal(changes.secret, record.id);
        delete next.previousSecretSealed;
        delete next.previousSecretUntilMs;
        if (current !== undefined) {
          next.previousSecretSealed = this.box.seal(current, record.id);
          next.previousSecretUntilMs = now.getTime() + this.rotationOverlapMs;
        }
      }
    }
    if (changes.filter === null) delete next.filter;
    else if (changes.filter !== undefined) next.filter = changes.filter;
    if (changes.signature === 'hmac') {
      delete next.signature;
      delete next.signingKeys;
    } else if (
      changes.signature === 'ed25519' ||
      (changes.rotateSigningKey === true && record.signature === 'ed25519')
    ) {
      next.signature = 'ed25519';
      const newest = record.signingKeys?.[0];
      if (newest === undefined)
        next.signingKeys = [this.sealKey(newSigningKey(record.id, 1, now.getTime()), record.id)];
      else if (changes.rotateSigningKey === true) {
        // The new key is published now and signs only KEY_PUBLISH_LEAD_MS later, so receivers that
        // refetch the key set as its cache allows hold it first; the key that signs now goes on until
        // the new one has signed for the overlap. Any other key (one that never signed yet, or one
        // already being replaced) is dropped.
        const signing = signingKeysAt(record.signingKeys ?? [], now.getTime())[0] ?? newest;
        const fromMs = now.getTime() + KEY_PUBLISH_LEAD_MS;
        const fresh = this.sealKey(
          { ...newSigningKey(record.id, keyNumber(newest.kid) + 1, now.getTime()), fromMs },
          record.id,
        );
        next.signingKeys = [fresh, { ...signing, untilMs: fromMs + this.rotationOverlapMs }];
      }
    }
    if ((next.signature ?? 'hmac') === 'hmac' && next.secretSealed === undefined) {
      if (changes.secret === null) return 'unsigned';
      if (changes.signature === 'hmac') next.secretSealed = this.box.seal(newWebhookSecret(), record.id);
    }
    if (changes.enabled === true) {
      delete next.disabledReason;
      delete next.disabledAtMs;
    } else if (changes.enabled === false && record.disabledReason === undefined) {
      next.disabledReason = 'paused';
      next.disabledAtMs = now.getTime();
    }
    const problem = orderingProblem(next) ?? this.applyReceiverChanges(next, changes);
    return problem === undefined ? next : { problem };
  }

  /**
   * Applies a change's headers (merged: names case-insensitive, null removes), auth and client
   * certificate to `next`, sealing what is secret; then the problem the whole webhook has across
   * fields, if any: too many headers, an authorization header beside auth, a client certificate on
   * a plain-http callback URL.
   */
  private applyReceiverChanges(
    next: WebhookRecord,
    changes: Pick<WebhookChanges, 'headers' | 'auth' | 'clientCertificate'>,
  ): string | undefined {
    if (changes.headers !== undefined) {
      const pairs = changes.headers === null ? [] : mergeHeaders(this.openHeaders(next), changes.headers);
      const problem = headersProblem(pairs);
      if (problem !== undefined) return problem;
      if (pairs.length === 0) {
        delete next.headerNames;
        delete next.headersSealed;
      } else {
        next.headerNames = pairs.map(([name]) => name);
        next.headersSealed = this.box.seal(JSON.stringify(pairs), sealedFor(next.id, 'headers'));
      }
    }
    if (changes.auth === null) delete next.auth;
    else if (changes.auth !== undefined) next.auth = this.sealAuth(changes.auth, next.id);
    if (changes.clientCertificate === null) delete next.clientCert;
    else if (changes.clientCertificate !== undefined) {
      const { keyPem, ...shown } = changes.clientCertificate;
      if (keyPem === undefined) throw new Error('a client certificate needs its key');
      next.clientCert = { ...shown, keySealed: this.box.seal(keyPem, sealedFor(next.id, 'client key')) };
    }
    if (next.clientCert !== undefined && !next.callbackUrl.startsWith('https:'))
      return 'tls_client_certificate needs an https callback_url';
    return headersAuthProblem(next.headerNames ?? [], next.auth !== undefined);
  }

  private openHeaders(record: WebhookRecord): [string, string][] {
    if (record.headersSealed === undefined) return [];
    return JSON.parse(this.box.open(record.headersSealed, sealedFor(record.id, 'headers'))) as [string, string][];
  }

  private sealAuth(auth: ReceiverAuth, webhookId: string): NonNullable<WebhookRecord['auth']> {
    const secret = auth.type === 'basic' ? auth.password : auth.type === 'bearer' ? auth.token : auth.clientSecret;
    if (secret === undefined) throw new Error(`${auth.type} auth needs its secret`);
    const secretSealed = this.box.seal(secret, sealedFor(webhookId, 'auth'));
    if (auth.type === 'basic') return { type: 'basic', username: auth.username, secretSealed };
    if (auth.type === 'bearer') return { type: 'bearer', secretSealed };
    return {
      type: auth.type,
      tokenUrl: auth.tokenUrl,
      clientId: auth.clientId,
      ...(auth.scope === undefined ? {} : { scope: auth.scope }),
      ...(auth.audience === undefined ? {} : { audience: auth.audience }),
      tokenAuthMethod: auth.tokenAuthMethod,
      secretSealed,
    };
  }

  /** The receiver auth of a record, its secret opened when this process has the key. */
  private openAuth(record: WebhookRecord): ReceiverAuth | undefined {
    const stored = record.auth;
    if (stored === undefined) return undefined;
    const secret = this.box.hasKey ? this.box.open(stored.secretSealed, sealedFor(record.id, 'auth')) : undefined;
    if (stored.type === 'basic') return { type: 'basic', username: stored.username ?? '', password: secret };
    if (stored.type === 'bearer') return { type: 'bearer', token: secret };
    return {
      type: stored.type,
      tokenUrl: stored.tokenUrl ?? '',
      clientId: stored.clientId ?? '',
      clientSecret: secret,
      scope: stored.scope,
      audience: stored.audience,
      tokenAuthMethod: stored.tokenAuthMethod ?? 'client_secret_basic',
    };
  }

  /** The webhook of a record; without a key (the CLI's commands) it comes without its secrets and private keys. */
  private toWebhook(record: WebhookRecord): Webhook {
    const open = (sealed: string | undefined, associatedData = record.id) =>
      sealed === undefined || !this.box.hasKey ? undefined : this.box.open(sealed, associatedData);
    const previous = open(record.previousSecretSealed);
    return {
      id: record.id,
      vendorId: record.vendorId,
      eventType: record.eventType,
      callbackUrl: record.callbackUrl,
      secret: open(record.secretSealed),
      previousSecret:
        previous === undefined || record.previousSecretUntilMs === undefined
          ? undefined
          : { secret: previous, untilMs: record.previousSecretUntilMs },
      disabled:
        record.disabledReason === undefined
          ? undefined
          : { reason: record.disabledReason, atMs: record.disabledAtMs ?? 0 },
      rateLimitPerSecond: record.rateLimitPerSecond,
      signature: record.signature ?? 'hmac',
      filter: record.filter,
      signingKeys: this.box.hasKey
        ? (record.signingKeys ?? []).map(({ privateSealed, ...key }) => ({
            ...key,
            kid: this.publicKid(key.kid),
            privateKey: this.box.open(privateSealed, record.id),
          }))
        : [],
      ordering: record.ordering ?? 'none',
      orderingKey: record.orderingKey,
      maxConcurrency: record.maxConcurrency,
      retentionMs: record.retentionMs,
      retry: record.retry,
      includeFields: record.includeFields,
      priority: record.priority ?? 'normal',
      propagateTrace: record.propagateTrace === true,
      headers: this.box.hasKey
        ? this.openHeaders(record).map(([name, value]) => ({ name, value }))
        : (record.headerNames ?? []).map((name) => ({ name, value: undefined })),
      auth: this.openAuth(record),
      clientCertificate:
        record.clientCert === undefined
          ? undefined
          : {
              ...record.clientCert,
              keyPem: open(record.clientCert.keySealed, sealedFor(record.id, 'client key')),
            },
      createdAt: record.createdAt,
      updatedAt: record.updatedAt,
    };
  }

  /**
   * The kid receivers see for a key the record names `<webhook id>.<n>`: an opaque digest under the
   * engine's key, so the public key set lists no webhook id and does not show which keys belong together.
   */
  private publicKid(recordKid: string): string {
    return this.box.opaqueId('signing key id', recordKid);
  }

  /** A key pair as the record keeps it: the private key sealed, bound to the webhook id. */
  private sealKey(key: SigningKey, webhookId: string): NonNullable<WebhookRecord['signingKeys']>[number] {
    const { privateKey, ...rest } = key;
    return { ...rest, privateSealed: this.box.seal(privateKey, webhookId) };
  }
}
