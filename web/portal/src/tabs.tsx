import { useEffect, useRef, useState } from 'preact/hooks';

/**
 * The portal's tab bar. On a phone its tabs do not fit: the bar scrolls sideways (never the page),
 * and a scrolled-off tab must not look like no tab at all. So each edge beyond which tabs lie fades
 * out under an arrow (`more-before`, `more-after` on the frame, kept current as the bar scrolls or
 * changes width), and the current page's tab is scrolled into view when the page changes.
 */

export interface Tab {
  key: string;
  label: string;
  href: string;
}

/** Whether content lies beyond the start and the end of a sideways scroller. */
interface Edges {
  before: boolean;
  after: boolean;
}

/** A pixel of slack: scroll positions are fractional on zoomed and high-density screens. */
const SLACK_PX = 1;

function edgesOf(el: HTMLElement): Edges {
  return {
    before: el.scrollLeft > SLACK_PX,
    after: el.scrollLeft + el.clientWidth < el.scrollWidth - SLACK_PX,
  };
}

/** Scrolls `tab` into its bar's view if it lies (partly) outside, clear of the edges' fades; only sideways. */
function reveal(bar: HTMLElement, tab: HTMLElement): void {
  const marginPx = 32;
  // The bar is the tab's offset parent: offsetLeft is where the tab lies in the bar's content.
  const start = tab.offsetLeft;
  const end = start + tab.offsetWidth;
  if (start < bar.scrollLeft + marginPx) bar.scrollLeft = Math.max(0, start - marginPx);
  else if (end > bar.scrollLeft + bar.clientWidth - marginPx) bar.scrollLeft = end - bar.clientWidth + marginPx;
}

export function TabBar({ label, tabs, current }: { label: string; tabs: readonly Tab[]; current: string }) {
  const bar = useRef<HTMLElement>(null);
  const [edges, setEdges] = useState<Edges>({ before: false, after: false });

  useEffect(() => {
    const el = bar.current!;
    const update = () =>
      setEdges((old) => {
        const now = edgesOf(el);
        return now.before === old.before && now.after === old.after ? old : now;
      });
    update();
    el.addEventListener('scroll', update, { passive: true });
    // The bar's width (a turned phone, a larger font) and its tabs' (fonts loading) change what fits.
    const resized = new ResizeObserver(update);
    resized.observe(el);
    for (const child of el.children) resized.observe(child);
    return () => {
      el.removeEventListener('scroll', update);
      resized.disconnect();
    };
  }, []);

  useEffect(() => {
    const tab = bar.current!.querySelector<HTMLElement>('[aria-current="page"]');
    if (tab) reveal(bar.current!, tab);
  }, [current]);

  return (
    <div class={`tabs-frame${edges.before ? ' more-before' : ''}${edges.after ? ' more-after' : ''}`}>
      <nav class="tabs" aria-label={label} ref={bar}>
        {tabs.map((tab) => (
          <a key={tab.key} href={tab.href} aria-current={tab.key === current ? 'page' : undefined}>
            {tab.label}
          </a>
        ))}
      </nav>
    </div>
  );
}
