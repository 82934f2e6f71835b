// Creates a blob container on Azurite with a SharedKey-signed request
// (anonymous requests get 403). Usage: node create-container.js PORT NAME
const http = require('http'), crypto = require('crypto');
const [port, container] = process.argv.slice(2);
const account = 'devstoreaccount1';
const key = Buffer.from('Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==', 'base64');
const date = new Date().toUTCString();
const version = '2021-10-04';
const stringToSign = ['PUT', '', '', '', '', '', '', '', '', '', '', '',
  `x-ms-date:${date}\nx-ms-version:${version}`,
  `/${account}/${account}/${container}\nrestype:container`].join('\n');
const sig = crypto.createHmac('sha256', key).update(stringToSign, 'utf8').digest('base64');
const req = http.request({
  host: '127.0.0.1', port, method: 'PUT', path: `/${account}/${container}?restype=container`,
  headers: { 'x-ms-date': date, 'x-ms-version': version, 'Authorization': `SharedKey ${account}:${sig}`, 'Content-Length': 0 },
}, res => { let b = ''; res.on('data', d => b += d); res.on('end', () => { console.log(res.statusCode, b); process.exit(res.statusCode === 201 || res.statusCode === 409 ? 0 : 1); }); });
req.on('error', e => { console.error(e.message); process.exit(1); });
req.end();
