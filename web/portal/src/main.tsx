import { render } from 'preact';
import { App } from './app';
import { takeLinkToken } from './session';
import './styles.css';

// Before anything renders: the session opens after the first paint, by when the fragment may have changed.
const linkToken = takeLinkToken();
const root = document.getElementById('app');
if (root) {
  root.textContent = '';
  render(<App linkToken={linkToken} />, root);
}
