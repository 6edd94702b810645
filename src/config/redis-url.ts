/** A Redis Cluster seed node. */
interface ClusterSeed {
  host: string;
  port: number;
}

/** What `REDIS_URL` names: one Redis server (the URL as ioredis takes it), or a Redis Cluster. */
type RedisTarget =
  | { kind: 'server'; url: string }
  | { kind: 'cluster'; seeds: ClusterSeed[]; username: string | undefined; password: string | undefined; tls: boolean };

export type ParsedRedisUrl = ({ ok: true } & RedisTarget) | { ok: false; reason: string };

const SERVER_RE = /^rediss?:\/\//;
const CLUSTER_RE = /^(rediss?)\+cluster:\/\/(?:([^@/]*)@)?([^/?#@]+)\/?$/;
/** `host:port`, `host`, `[v6]:port` or `[v6]`. */
const SEED_RE = /^(?:\[([0-9A-Fa-f:.]+)\]|([A-Za-z0-9.-]+))(?::(\d{1,5}))?$/;
const DEFAULT_PORT = 6379;

const CLUSTER_FORM = 'redis+cluster://[user:password@]host:port[,host:port…] (rediss+cluster:// for TLS)';

function decode(text: string): string | undefined {
  try {
    return decodeURIComponent(text);
  } catch {
    return undefined;
  }
}

/**
 * Reads `REDIS_URL`: `redis://` or `rediss://` names one server; `redis+cluster://` (or
 * `rediss+cluster://` with TLS) names a Redis Cluster by one or more comma-separated seed nodes,
 * the credentials, when given, applying to every node. Pure; never throws.
 */
export function parseRedisUrl(text: string): ParsedRedisUrl {
  const cluster = CLUSTER_RE.exec(text);
  if (cluster) {
    const [, scheme, userInfo, hostList = ''] = cluster;
    const seeds: ClusterSeed[] = [];
    for (const part of hostList.split(',')) {
      const seed = SEED_RE.exec(part.trim());
      const port = Number(seed?.[3] ?? DEFAULT_PORT);
      if (!seed || port < 1 || port > 65535)
        return { ok: false, reason: `"${part}" is not a host:port seed node; expected ${CLUSTER_FORM}` };
      seeds.push({ host: seed[1] ?? seed[2] ?? '', port });
    }
    let username: string | undefined;
    let password: string | undefined;
    if (userInfo !== undefined) {
      const colon = userInfo.indexOf(':');
      username = decode(colon === -1 ? userInfo : userInfo.slice(0, colon));
      password = colon === -1 ? undefined : decode(userInfo.slice(colon + 1));
      if (username === undefined || (colon !== -1 && password === undefined))
        return { ok: false, reason: 'the credentials are not valid URL encoding' };
      if (username === '') username = undefined;
    }
    return { ok: true, kind: 'cluster', seeds, username, password, tls: scheme === 'rediss' };
  }
  if (/^rediss?\+cluster:/.test(text))
    return { ok: false, reason: `expected ${CLUSTER_FORM} (no database number or query)` };
  if (SERVER_RE.test(text)) return { ok: true, kind: 'server', url: text };
  return { ok: false, reason: `expected a redis:// or rediss:// URL, or ${CLUSTER_FORM} for a Redis Cluster` };
}

/**
 * `REDIS_URL` as it may be shown in logs and messages: without `user:password@` (and without a
 * query, which may carry options with credentials). `redis://hook:pw@h:6379/2` → `redis://h:6379/2`.
 * Pure; never throws.
 */
export function redisUrlForLog(text: string): string {
  const withoutCredentials = text.replace(/^([a-z+]+:\/\/)[^/?#]*@/i, '$1');
  return withoutCredentials.replace(/[?#].*$/, '');
}
