import { useCallback, useEffect, useRef, useState } from 'preact/hooks';

export interface Resource<T> {
  data: T | undefined;
  error: Error | undefined;
  loading: boolean;
  /** Loads again, keeping what is shown until the new answer arrives. */
  reload: () => void;
}

/**
 * Data the page loads from the API: loaded again when `key` changes (showing nothing of the old
 * key's meanwhile) or when `reload` is called (showing the old data meanwhile). An answer that
 * arrives after the component is gone, or after a newer load started, is dropped.
 */
export function useResource<T>(key: string, load: () => Promise<T>): Resource<T> {
  const [state, setState] = useState<{ key: string; data?: T; error?: Error; loading: boolean }>({
    key,
    loading: true,
  });
  const [version, setVersion] = useState(0);
  const loader = useRef(load);
  loader.current = load;
  useEffect(() => {
    let current = true;
    setState((old) => (old.key === key ? { ...old, loading: true } : { key, loading: true }));
    loader.current().then(
      (data) => current && setState({ key, data, loading: false }),
      (error: Error) =>
        current && setState((old) => ({ key, ...(old.key === key ? { data: old.data } : {}), error, loading: false })),
    );
    return () => {
      current = false;
    };
  }, [key, version]);
  const reload = useCallback(() => setVersion((v) => v + 1), []);
  const fresh = state.key === key;
  return {
    data: fresh ? state.data : undefined,
    error: fresh ? state.error : undefined,
    loading: !fresh || state.loading,
    reload,
  };
}

export interface Watch<T> {
  value: T | undefined;
  error: Error | undefined;
  done: boolean;
}

/**
 * Polls `read` every `everyMs` while `key` is set, until `done(value)` holds or `maxMs` passed (the
 * watch then ends, not the thing watched). `read` answering undefined means "not there yet". A
 * failed read ends the watch with its error. Polling stops when the component goes away, which is
 * also what happens when access ends.
 */
export function useWatch<T>(
  key: string | undefined,
  read: () => Promise<T | undefined>,
  done: (value: T) => boolean,
  everyMs = 500,
  maxMs = 120_000,
): Watch<T> {
  const [state, setState] = useState<Watch<T> & { key?: string }>({ value: undefined, error: undefined, done: false });
  const reader = useRef({ read, done });
  reader.current = { read, done };
  useEffect(() => {
    setState({ key, value: undefined, error: undefined, done: false });
    if (key === undefined) return;
    let timer: ReturnType<typeof setTimeout> | undefined;
    let stopped = false;
    const endsAtMs = Date.now() + maxMs;
    const tick = async () => {
      try {
        const value = await reader.current.read();
        if (stopped) return;
        const finished = (value !== undefined && reader.current.done(value)) || Date.now() > endsAtMs;
        setState({ key, value, error: undefined, done: finished });
        if (!finished) timer = setTimeout(() => void tick(), everyMs);
      } catch (error) {
        if (!stopped) setState((old) => ({ ...old, error: error as Error, done: true }));
      }
    };
    void tick();
    return () => {
      stopped = true;
      clearTimeout(timer);
    };
  }, [key, everyMs, maxMs]);
  return state.key === key ? state : { value: undefined, error: undefined, done: false };
}

/** Calls `tick` every `everyMs` while the component is shown (a page's periodic refresh). */
export function useEvery(everyMs: number, tick: () => void): void {
  const saved = useRef(tick);
  saved.current = tick;
  useEffect(() => {
    const timer = setInterval(() => saved.current(), everyMs);
    return () => clearInterval(timer);
  }, [everyMs]);
}

export interface Action {
  busy: boolean;
  error: Error | undefined;
  /** Runs `work` (one at a time), keeping its error to show. */
  run: (work: () => Promise<void>) => Promise<void>;
}

/** A user's action on the API: busy while it runs (buttons disable), its error kept for the page to show. */
export function useAction(): Action {
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<Error>();
  const run = useCallback(async (work: () => Promise<void>) => {
    setBusy(true);
    setError(undefined);
    try {
      await work();
    } catch (e) {
      setError(e as Error);
    } finally {
      setBusy(false);
    }
  }, []);
  return { busy, error, run };
}

/** A page of a cursor-paged list, as the pages hook reads it. */
export interface CursorPage<T> {
  items: T[];
  next: string | null;
  /** Whether more may follow (absent: whenever `next` is given). */
  hasMore?: boolean;
}

export interface Pages<T> {
  items: T[] | undefined;
  hasMore: boolean;
  loading: boolean;
  error: Error | undefined;
  /** Appends the next page. */
  more: () => Promise<void>;
}

/**
 * A list the API answers a page at a time (the delivery log, the event feed): the first page loaded
 * again whenever a value in `deps` changes, later ones appended by `more`. A first page that arrives
 * after a newer one was asked for is dropped.
 */
export function usePages<T>(load: (cursor?: string) => Promise<CursorPage<T>>, deps: readonly unknown[]): Pages<T> {
  const [items, setItems] = useState<T[]>();
  const [next, setNext] = useState<string | null>(null);
  const [hasMore, setHasMore] = useState(false);
  const [loading, setLoading] = useState(false);
  const [error, setError] = useState<Error>();
  const took = (answer: CursorPage<T>) => {
    setNext(answer.next);
    setHasMore(answer.hasMore ?? answer.next !== null);
  };
  useEffect(() => {
    let current = true;
    setLoading(true);
    setError(undefined);
    load().then(
      (answer) => {
        if (!current) return;
        setItems(answer.items);
        took(answer);
        setLoading(false);
      },
      (e: Error) => {
        if (!current) return;
        setError(e);
        setLoading(false);
      },
    );
    return () => {
      current = false;
    };
  }, deps);
  const more = async () => {
    if (next === null) return;
    setLoading(true);
    try {
      const answer = await load(next);
      setItems((old) => [...(old ?? []), ...answer.items]);
      took(answer);
    } catch (e) {
      setError(e as Error);
    } finally {
      setLoading(false);
    }
  };
  return { items, hasMore, loading, error, more };
}
