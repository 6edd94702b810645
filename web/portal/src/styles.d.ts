// esbuild bundles the stylesheet the entry imports into its own file (assets/app-<hash>.css).
declare module '*.css';
