/** Roles an API key can carry. `admin` passes every role check. */
export const ROLES = [
  'vendor',
  'machines:read',
  'agents:read',
  'tasks:read',
  'events:write',
  'portal:issue',
  'admin',
] as const;

export type Role = (typeof ROLES)[number];

/** The identity an authenticated request acts as. */
export interface Principal {
  keyId: string;
  name: string;
  roles: readonly Role[];
  /** Set for vendor keys: the vendor whose webhooks the key manages. */
  vendorId: string | undefined;
  /** Set when a vendor portal session acts (its cookie, not an API key): what the session may do. */
  portal?: { sessionId: string; permission: PortalPermission };
}

/** What a vendor portal session may do, weakest first: each includes the ones before it. */
export const PORTAL_PERMISSIONS = ['read', 'replay', 'manage'] as const;

export type PortalPermission = (typeof PORTAL_PERMISSIONS)[number];

/** Whether a session holding `held` may do what needs `needed`. */
export function permits(held: PortalPermission, needed: PortalPermission): boolean {
  return PORTAL_PERMISSIONS.indexOf(held) >= PORTAL_PERMISSIONS.indexOf(needed);
}

/** Whether `principal` may act in `role` (admin may act in any). */
export function hasRole(principal: Principal, role: Role): boolean {
  return principal.roles.includes(role) || principal.roles.includes('admin');
}
