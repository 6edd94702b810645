import { execFileSync } from 'node:child_process';
import { randomInt } from 'node:crypto';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';

/** A certificate authority made for a test run, and a server certificate it issued. */
export interface TestCa {
  /** The CA's certificate (PEM): what a client trusts, e.g. through NODE_EXTRA_CA_CERTS. */
  caPath: string;
  /** The server's certificate and key (PEM) for `localhost`, `*.hookline.test`, 127.0.0.1 and ::1. */
  cert: string;
  key: string;
}

/** Names every receiver of the tests may use: `<anything>.hookline.test`, resolved by the tests' own lookup. */
export const TEST_DOMAIN = 'hookline.test';

function openssl(args: string[], cwd: string): void {
  execFileSync('openssl', args, { cwd, stdio: ['ignore', 'ignore', 'pipe'] });
}

/** Whether the `openssl` command is there (Debian: apt-get install openssl). */
export function hasOpenssl(): boolean {
  try {
    execFileSync('openssl', ['version'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

/** Makes a CA (P-256, valid two days) and a server certificate it signed, in `dir`, with the openssl command. */
export function makeTestCa(dir: string): TestCa {
  mkdirSync(dir, { recursive: true });
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];
  openssl(
    [
      'req',
      '-x509',
      ...ec,
      '-keyout',
      'ca.key',
      '-out',
      'ca.pem',
      '-days',
      '2',
      '-subj',
      '/CN=Hookline Test CA',
      '-addext',
      'basicConstraints=critical,CA:TRUE',
      '-addext',
      'keyUsage=critical,keyCertSign,cRLSign',
    ],
    dir,
  );
  openssl(['req', ...ec, '-keyout', 'server.key', '-out', 'server.csr', '-subj', '/CN=localhost'], dir);
  writeFileSync(
    path.join(dir, 'server.ext'),
    [
      'basicConstraints=CA:FALSE',
      'keyUsage=critical,digitalSignature',
      'extendedKeyUsage=serverAuth',
      `subjectAltName=DNS:localhost,DNS:*.${TEST_DOMAIN},IP:127.0.0.1,IP:::1`,
    ].join('\n'),
  );
  openssl(
    [
      'x509',
      '-req',
      '-in',
      'server.csr',
      '-CA',
      'ca.pem',
      '-CAkey',
      'ca.key',
      '-CAcreateserial',
      '-out',
      'server.pem',
      '-days',
      '2',
      '-extfile',
      'server.ext',
    ],
    dir,
  );
  return {
    caPath: path.join(dir, 'ca.pem'),
    cert: readFileSync(path.join(dir, 'server.pem'), 'utf8'),
    key: readFileSync(path.join(dir, 'server.key'), 'utf8'),
  };
}

let issued = 0;

/**
 * A client certificate (P-256, extendedKeyUsage clientAuth) issued by the run's CA, for receivers
 * that require mutual TLS. `expired`: valid for one day in 2020 (openssl ca sets the dates).
 */
export function issueClientCertificate(
  ca: Pick<TestCa, 'caPath'>,
  commonName: string,
  options: { expired?: boolean } = {},
): { cert: string; key: string } {
  return issueCertificate(ca, `/CN=${commonName}/O=Hookline Tests`, ['extendedKeyUsage=clientAuth'], options);
}

/**
 * A server certificate issued by the run's CA for exactly `subjectAltName` (e.g. `IP:127.0.0.1`),
 * its CN `commonName`: a receiver whose certificate names only what it says, unlike the run's own
 * server certificate, which also names `localhost`.
 */
export function issueServerCertificate(
  ca: Pick<TestCa, 'caPath'>,
  commonName: string,
  subjectAltName: string,
): { cert: string; key: string } {
  return issueCertificate(ca, `/CN=${commonName}/O=Hookline Tests`, [
    'extendedKeyUsage=serverAuth',
    `subjectAltName=${subjectAltName}`,
  ]);
}

/** A P-256 certificate for `subject` with `extensions` (besides a leaf's basic constraints and key usage), signed by the run's CA. */
function issueCertificate(
  ca: Pick<TestCa, 'caPath'>,
  subject: string,
  extensions: string[],
  options: { expired?: boolean } = {},
): { cert: string; key: string } {
  const caDir = path.dirname(ca.caPath);
  issued += 1;
  const dir = path.join(caDir, `issued-${process.pid}-${issued}`);
  mkdirSync(dir, { recursive: true });
  const caKey = path.join(caDir, 'ca.key');
  openssl(
    [
      'req',
      '-newkey',
      'ec',
      '-pkeyopt',
      'ec_paramgen_curve:prime256v1',
      '-nodes',
      '-keyout',
      'leaf.key',
      '-out',
      'leaf.csr',
      '-subj',
      subject,
    ],
    dir,
  );
  writeFileSync(
    path.join(dir, 'leaf.ext'),
    ['basicConstraints=CA:FALSE', 'keyUsage=critical,digitalSignature', ...extensions].join('\n'),
  );
  if (options.expired) {
    writeFileSync(path.join(dir, 'index.txt'), '');
    writeFileSync(path.join(dir, 'serial'), '01\n');
    writeFileSync(
      path.join(dir, 'ca.cnf'),
      [
        '[ca]',
        'default_ca=d',
        '[d]',
        'database=index.txt',
        'new_certs_dir=.',
        'serial=serial',
        'default_md=sha256',
        'policy=p',
        '[p]',
        'commonName=supplied',
        'organizationName=optional',
      ].join('\n'),
    );
    openssl(
      [
        'ca',
        '-batch',
        '-config',
        'ca.cnf',
        '-cert',
        ca.caPath,
        '-keyfile',
        caKey,
        '-in',
        'leaf.csr',
        '-out',
        'leaf.pem',
        '-extfile',
        'leaf.ext',
        '-startdate',
        '20200101000000Z',
        '-enddate',
        '20200102000000Z',
        '-notext',
      ],
      dir,
    );
  } else {
    openssl(
      [
        'x509',
        '-req',
        '-in',
        'leaf.csr',
        '-CA',
        ca.caPath,
        '-CAkey',
        caKey,
        // A serial of its own: a shared serial file would race between test files issuing at once.
        '-set_serial',
        String(randomInt(1, 2 ** 47)),
        '-out',
        'leaf.pem',
        '-days',
        '2',
        '-extfile',
        'leaf.ext',
      ],
      dir,
    );
  }
  return {
    cert: readFileSync(path.join(dir, 'leaf.pem'), 'utf8'),
    key: readFileSync(path.join(dir, 'leaf.key'), 'utf8'),
  };
}
