/**
 * The payload filter the catalogue page shows: unavailable machines whose first GPU is an A100 or an
 * H100, with at least 256 GB of memory. Its paths are fields machine events carry (the unit tests run
 * it on the catalogue's samples), so a vendor can paste it into the editor and try it as it is.
 */
export const FILTER_EXAMPLE = {
  and: [
    { path: 'data.status', eq: 'unavailable' },
    { path: 'data.hardware_specs.gpus.0.name', in: ['NVIDIA A100 80GB PCIe', 'NVIDIA H100 80GB HBM3'] },
    { path: 'data.hardware_specs.memory.total_memory', gte: 256 },
  ],
};
