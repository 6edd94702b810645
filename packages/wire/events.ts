/**
 * Hookline's wire format: the six event types and the data each carries. This one file is compiled
 * into both client packages (`@hookline/verify` for receivers, `@hookline/producer` for producers),
 * so neither depends on the other and the shapes are written once. The engine's test suite checks
 * them against the schemas ingest validates with (test/unit/client-types.test.ts).
 *
 * Limits that the engine enforces (lengths, id characters, decimal amounts) are in the README of each
 * package, not in these types.
 */

/** The six event types a webhook subscribes to, in the order the interface lists them. */
export const WEBHOOK_EVENT_TYPES = [
  'EVENT_TYPE_MACHINE_CREATED',
  'EVENT_TYPE_MACHINE_UPDATED',
  'EVENT_TYPE_MACHINE_REMOVED',
  'EVENT_TYPE_DEPLOYMENT_CREATED',
  'EVENT_TYPE_DEPLOYMENT_UPDATED',
  'EVENT_TYPE_DEPLOYMENT_STOPPED',
] as const;

export type WebhookEventType = (typeof WEBHOOK_EVENT_TYPES)[number];

/** A GPU installed on a machine. */
export interface Gpu {
  id?: string;
  /** Model name, e.g. `NVIDIA GeForce RTX 4090`. */
  name?: string;
  /** GPU memory in GB. */
  memory?: number;
  cuda_cores?: number;
  tensor_cores?: number;
  /** Floating-point operations per second, in TFLOPs. */
  flops?: number;
}

/** A price the owner accepts for renting the machine. */
export interface MachinePrice {
  /** The renter is charged the price listed under this id, even if the owner later changes it. */
  id?: string;
  /** A non-negative decimal number written as text, e.g. `"0.45"`. */
  amount?: string;
  /** A standard currency such as `USD` or a cryptocurrency such as `BTC`. */
  currency?: string;
}

/** A compute machine offered for rent: the data of the machine events. */
export interface Machine {
  /** `available` marks a machine ready to be deployed; `unavailable` is the other named value. */
  status: string;
  metadata: {
    machine_id: string;
    geo_location?: { country?: string; city?: string };
    cuda_version?: string;
  };
  hardware_specs?: {
    /** Clocks in MHz. */
    cpu?: {
      model?: string;
      cpu_arch?: string;
      cores?: number;
      threads?: number;
      base_clock?: number;
      boost_clock?: number;
    };
    /** In GB. */
    memory?: { total_memory?: number; memory_required?: number };
    /** Disk space in GB. */
    storage?: { disk_space_available?: number; disk_type?: string; disk_name?: string };
    gpus?: Gpu[];
  };
  /** Bandwidth in Mbps. */
  network_info?: { bandwidth?: number };
  machine_prices?: MachinePrice[];
}

/** What a removal needs: the machine's id. */
export interface MachineRef {
  metadata: { machine_id: string };
}

/** The agent statuses of a deployment (interface section 3). */
export type AgentStatus =
  'STATUS_UNSPECIFIED' | 'STATUS_PENDING' | 'STATUS_STOPPING' | 'STATUS_STOPPED' | 'STATUS_FAILED' | 'STATUS_RUNNING';

/** The agent deployment status: the data of the deployment events. */
export interface AgentDeploymentStatus {
  deployment_id: string;
  /** The machine the agent runs on. */
  machine_id: string;
  status: AgentStatus;
  /** Why it failed; the platform sends an empty string when nothing failed, and may leave it out. */
  fail_reason?: string;
  /** Additional key-value information about the deployment; may be left out. */
  metadata?: Record<string, string>;
}

/**
 * The `data` of each event type. Hookline delivers `data` exactly as the producer sent it, so a
 * receiver may also find fields these types do not name.
 */
export interface WebhookEventData {
  EVENT_TYPE_MACHINE_CREATED: Machine;
  /** The whole Machine after the change. */
  EVENT_TYPE_MACHINE_UPDATED: Machine;
  /** Often only `{ metadata: { machine_id } }`; a full Machine is allowed too. */
  EVENT_TYPE_MACHINE_REMOVED: Machine | MachineRef;
  EVENT_TYPE_DEPLOYMENT_CREATED: AgentDeploymentStatus;
  EVENT_TYPE_DEPLOYMENT_UPDATED: AgentDeploymentStatus;
  EVENT_TYPE_DEPLOYMENT_STOPPED: AgentDeploymentStatus;
}
