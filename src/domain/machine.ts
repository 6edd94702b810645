import { z } from 'zod';
import { externalIdSchema } from './ids.js';

/** The machine statuses the interface names; `status` itself accepts any non-empty text. */
export const MACHINE_STATUSES = ['available', 'unavailable'] as const;

/** Longest text field we store; the platform's names and ids are far shorter. */
const MACHINE_TEXT_LENGTH_MAX = 256;
/** Most GPUs, and most price entries, one machine may carry. */
const MACHINE_LIST_LENGTH_MAX = 64;

const text = (description: string) => z.string().min(1).max(MACHINE_TEXT_LENGTH_MAX).meta({ description });

const count = (description: string) => z.int().min(0).meta({ description });

/** A decimal amount written as text: digits with an optional fractional part, e.g. `0.45` or `12`. */
const DECIMAL_AMOUNT_RE = /^\d{1,30}(\.\d{1,18})?$/;

const gpuSchema = z
  .object({
    id: text('Unique identifier of the GPU.').optional(),
    name: text('Model name of the GPU, e.g. "NVIDIA GeForce RTX 4090".').optional(),
    memory: count('GPU memory in GB.').optional(),
    cuda_cores: count('Number of CUDA cores.').optional(),
    tensor_cores: count('Number of Tensor cores.').optional(),
    flops: count('Floating-point operations per second, in TFLOPs.').optional(),
  })
  .meta({ id: 'Gpu', description: 'A GPU installed on the machine.' });

const machinePriceSchema = z
  .object({
    id: text(
      'Unique identifier of the price entry. The renter is charged the price listed under this id, even if the owner later changes the price.',
    ).optional(),
    amount: z
      .string()
      .regex(DECIMAL_AMOUNT_RE, 'must be a non-negative decimal number written as text, e.g. "0.45"')
      .meta({ description: 'Amount in the given currency, a decimal number written as text (e.g. "0.45").' })
      .optional(),
    currency: z
      .string()
      .min(1)
      .max(32)
      .meta({ description: 'Currency of the price: a standard currency such as USD or a cryptocurrency such as BTC.' })
      .optional(),
  })
  .meta({ id: 'MachinePrice', description: 'A price the owner accepts for renting the machine.' });

/** The Machine resource of the interface (section 2); machine events carry it whole. */
export const machineSchema = z
  .object({
    status: text(
      'Availability of the machine: "available" marks a machine ready to be deployed; "unavailable" is the other named value.',
    ),
    metadata: z
      .object({
        machine_id: externalIdSchema.meta({ description: 'Unique identifier of the machine.' }),
        geo_location: z
          .object({
            country: text('Country of the machine.').optional(),
            city: text('City of the machine.').optional(),
          })
          .meta({ description: 'Where the machine is.' })
          .optional(),
        cuda_version: text('CUDA version installed on the machine.').optional(),
      })
      .meta({ description: 'Identity and location of the machine.' }),
    hardware_specs: z
      .object({
        cpu: z
          .object({
            model: text('CPU model.').optional(),
            cpu_arch: text('CPU architecture.').optional(),
            cores: count('Number of CPU cores.').optional(),
            threads: count('Number of CPU threads.').optional(),
            base_clock: count('Base clock in MHz.').optional(),
            boost_clock: count('Boost clock in MHz.').optional(),
          })
          .meta({ description: "The machine's CPU." })
          .optional(),
        memory: z
          .object({
            total_memory: count('Total memory in GB.').optional(),
            memory_required: count('Minimum memory required for the deployment, in GB.').optional(),
          })
          .meta({ description: "The machine's memory." })
          .optional(),
        storage: z
          .object({
            disk_space_available: count('Available disk space in GB.').optional(),
            disk_type: text('Disk type.').optional(),
            disk_name: text('Identifier of the disk.').optional(),
          })
          .meta({ description: "The machine's storage." })
          .optional(),
        gpus: z
          .array(gpuSchema)
          .max(MACHINE_LIST_LENGTH_MAX)
          .meta({ description: 'GPUs available on the machine.' })
          .optional(),
      })
      .meta({ description: 'Hardware specifications of the machine.' })
      .optional(),
    network_info: z
      .object({
        bandwidth: count('Available bandwidth in Mbps.').optional(),
      })
      .meta({ description: 'Network information of the machine.' })
      .optional(),
    machine_prices: z
      .array(machinePriceSchema)
      .max(MACHINE_LIST_LENGTH_MAX)
      .meta({ description: 'Prices the owner accepts for renting the machine; the renter chooses among them.' })
      .optional(),
  })
  .meta({
    id: 'Machine',
    description: 'A compute machine offered for rent, with its hardware, network information and prices.',
  });

export type Machine = z.infer<typeof machineSchema>;
