# syntax=docker/dockerfile:1
# Hookline's container image: `docker build -t hookline .`, then `docker run hookline api|worker|start`.
# The runtime stage holds only the compiled dist/, the `hookline` launcher (bin/), the production
# node_modules/ and package.json, and the same of the client packages the engine uses.

# ---- build: install everything, compile TypeScript, then drop the dev dependencies
FROM node:24-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
# The client packages are npm workspaces (the engine signs with @hookline/verify's code): npm ci
# links them into node_modules/@hookline/.
COPY packages ./packages
# No install scripts: the one native module the engine uses ships prebuilt (an optional package),
# and the dev tools' native add-ons are not needed to compile.
RUN npm ci --ignore-scripts --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json ./
COPY src ./src
# The build step that copies the stores' Lua scripts (src/store/lua/) into dist/ beside their loader.
COPY tools ./tools
# The vendor portal's browser app: bundled by esbuild into dist/portal/, which the API serves.
COPY web ./web
# The `hookline` command (package.json's bin): a launcher for dist/cli.js that stays executable.
COPY bin ./bin
# The build's incremental state (dist/.tsbuildinfo) serves only `npm start` on a developer's machine.
RUN npm run build && rm dist/.tsbuildinfo && npm prune --omit=dev

# ---- runtime
FROM node:24-bookworm-slim
ENV NODE_ENV=production \
    HOOKLINE_API_HOST=0.0.0.0 \
    HOOKLINE_DATA_DIR=/var/lib/hookline
WORKDIR /app
# Owned by root and read-only to the `node` user that runs the engine; only the data folder is its own.
COPY --from=build /app/package.json ./package.json
COPY --from=build /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
COPY --from=build /app/bin ./bin
# What the node_modules/@hookline/ links point to: each client package's manifest and built code.
COPY --from=build /app/packages/verify/package.json ./packages/verify/package.json
COPY --from=build /app/packages/verify/dist ./packages/verify/dist
COPY --from=build /app/packages/producer/package.json ./packages/producer/package.json
COPY --from=build /app/packages/producer/dist ./packages/producer/dist
RUN mkdir -p /var/lib/hookline && chown node:node /var/lib/hookline
USER node
# 8080: admin API (HOOKLINE_API_PORT). 9464: a standalone worker's /metrics and /healthz (HOOKLINE_METRICS_PORT).
EXPOSE 8080 9464
# Probes the API port, which fits `start` and `api`; a `worker` has no API port, so docker-compose.yml
# overrides this check for it with the same probe on HOOKLINE_METRICS_PORT.
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:' + (process.env.HOOKLINE_API_PORT || 8080) + '/healthz').then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))"]
ENTRYPOINT ["node", "bin/hookline.js"]
CMD ["start"]
