/** Roles an API key can carry. `admin` passes every role check. */
export const ROLES = ['vendor', 'machines:read', 'agents:read', 'tasks:read', 'events:write', 'admin'] as const;

export type Role = (typeof ROLES)[number];

/** The identity an authenticated request acts as. */
export interface Principal {
  keyId: string;
  name: string;
  roles: readonly Role[];
  /** Set for vendor keys: the vendor whose webhooks the key manages. */
  vendorId: string | undefined;
}

/** Whether `principal` may act in `role` (admin may act in any). */
export function hasRole(principal: Principal, role: Role): boolean {
  return principal.roles.includes(role) || principal.roles.includes('admin');
}
