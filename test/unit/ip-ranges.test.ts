import { describe, expect, it } from 'vitest';
import { embeddedIpv4, isLoopbackHost, isNonPublicAddress } from '../../src/http/net/ip-ranges.js';
import { hostName, isAllowedHost, isAllowedOrigin, type HostOriginPolicy } from '../../src/http/host-origin.js';

describe('isNonPublicAddress', () => {
  it.each([
    '127.0.0.1',
    '127.255.255.254',
    '10.1.2.3',
    '172.16.0.1',
    '172.31.255.255',
    '192.168.1.1',
    '169.254.169.254',
    '100.64.0.1',
    '0.0.0.0',
    '224.0.0.1',
    '255.255.255.255',
    '192.0.2.1',
    '::',
    '::1',
    'fe80::1',
    'fc00::1',
    'fd12:3456::1',
    'ff02::1',
    '::ffff:127.0.0.1',
    '::ffff:7f00:1',
    '::ffff:169.254.169.254',
    '::127.0.0.1',
    '64:ff9b::a00:1',
    '2002:c0a8:101::1',
    'not an address',
  ])('%s is not public', (address) => {
    expect(isNonPublicAddress(address)).toBe(true);
  });

  it.each(['8.8.8.8', '1.1.1.1', '172.32.0.1', '100.128.0.1', '2606:4700::1111', '::ffff:8.8.8.8', '64:ff9b::808:808'])('%s is public', (address) => {
    expect(isNonPublicAddress(address)).toBe(false);
  });

  it('reads the IPv4 address inside mapped, compatible, NAT64 and 6to4 forms', () => {
    expect(embeddedIpv4('::ffff:10.0.0.1')).toBe('10.0.0.1');
    expect(embeddedIpv4('::ffff:a00:1')).toBe('10.0.0.1');
    expect(embeddedIpv4('64:ff9b::7f00:1')).toBe('127.0.0.1');
    expect(embeddedIpv4('2002:7f00:1::')).toBe('127.0.0.1');
    expect(embeddedIpv4('2606:4700::1111')).toBeUndefined();
  });

  it('URL parsing writes odd IPv4 spellings as dotted quads before they are checked', () => {
    for (const spelling of ['2130706433', '0x7f000001', '0x7f.1', '127.1', '0177.0.0.1', '017700000001']) {
      const host = new URL(`http://${spelling}/`).hostname;
      expect(host).toBe('127.0.0.1');
      expect(isNonPublicAddress(host)).toBe(true);
    }
    expect(new URL('http://[::ffff:127.0.0.1]/').hostname).toBe('[::ffff:7f00:1]');
  });

  it('reads every IPv6 spelling Node accepts, zone ids and the dotted tail getaddrinfo prints included', () => {
    expect(embeddedIpv4('::127.0.0.1')).toBe('127.0.0.1');
    expect(embeddedIpv4('0:0:0:0:0:FFFF:10.0.0.1')).toBe('10.0.0.1');
    expect(embeddedIpv4('64:ff9b::8.8.8.8')).toBe('8.8.8.8');
    expect(embeddedIpv4('::')).toBeUndefined();
    expect(embeddedIpv4('::1')).toBeUndefined();
    expect(isNonPublicAddress('::8.8.8.8')).toBe(false);
    expect(isNonPublicAddress('fe80::1%eth0')).toBe(true);
    expect(isNonPublicAddress('fe80::1%vlan-1.5')).toBe(true);
    expect(isNonPublicAddress('2606:4700::1111%eth0')).toBe(false);
    for (const host of ['[::127.0.0.1]', '0:0:0:0:0:0:0:1', '::1%lo', '[::ffff:127.0.0.2]']) expect(isLoopbackHost(host), host).toBe(true);
  });

  it('takes only the spellings Node connects to as addresses, not inet_aton forms', () => {
    // A Host header is not URL-normalised: these reach isLoopbackHost as written.
    for (const spelling of ['0x7f.1', '2130706433', '127.1', '0177.0.0.1', '1.2.3.4%eth0', '::ffff:0177.0.0.1']) {
      expect(isLoopbackHost(spelling), spelling).toBe(false);
      expect(isNonPublicAddress(spelling), spelling).toBe(true);
    }
  });

  it('knows loopback names', () => {
    for (const host of ['localhost', 'LOCALHOST', 'app.localhost', '127.0.0.1', '127.9.9.9', '[::1]', '::1', '::ffff:127.0.0.1']) expect(isLoopbackHost(host)).toBe(true);
    for (const host of ['localhost.example.com', '10.0.0.1', '::2', 'example.com']) expect(isLoopbackHost(host)).toBe(false);
  });
});

describe('Host and Origin rules', () => {
  const policy: HostOriginPolicy = { boundHost: '127.0.0.1', allowedHosts: ['models.lan', '.corp.example'], cors: ['https://app.example.com'] };

  it('parses Host headers', () => {
    expect(hostName('LocalHost:8080')).toBe('localhost');
    expect(hostName('[::1]:8080')).toBe('::1');
    expect(hostName('example.com')).toBe('example.com');
    expect(hostName('a b')).toBeUndefined();
    expect(hostName('user@example.com')).toBeUndefined();
    expect(hostName('example.com/path')).toBeUndefined();
  });

  it('answers loopback names, IP literals, the bound name and allowed names only', () => {
    for (const host of ['127.0.0.1:8080', 'localhost:8080', 'localhost', '[::1]:8080', '192.168.1.20:8080', 'models.lan:8080', 'gpu.corp.example', 'corp.example', undefined]) {
      expect(isAllowedHost(host, policy), String(host)).toBe(true);
    }
    for (const host of ['attacker.example:8080', 'models.lan.attacker.example', 'xcorp.example', 'localhost.attacker.example', '', 'bad host']) {
      expect(isAllowedHost(host, policy), host).toBe(false);
    }
    expect(isAllowedHost('anything.example', { ...policy, allowedHosts: ['*'] })).toBe(true);
    expect(isAllowedHost('box.local:8080', { ...policy, boundHost: 'box.local' })).toBe(true);
  });

  it('lets no Origin, the same origin and the --cors origins through', () => {
    expect(isAllowedOrigin(undefined, '127.0.0.1:8080', policy)).toBe(true);
    expect(isAllowedOrigin('http://127.0.0.1:8080', '127.0.0.1:8080', policy)).toBe(true);
    expect(isAllowedOrigin('https://app.example.com', '127.0.0.1:8080', policy)).toBe(true);
    expect(isAllowedOrigin('https://app.example.com:443', '127.0.0.1:8080', policy)).toBe(true);
    expect(isAllowedOrigin('http://127.0.0.1:9999', '127.0.0.1:8080', policy)).toBe(false);
    expect(isAllowedOrigin('https://evil.example', '127.0.0.1:8080', policy)).toBe(false);
    expect(isAllowedOrigin('http://app.example.com', '127.0.0.1:8080', policy)).toBe(false);
    expect(isAllowedOrigin('null', '127.0.0.1:8080', policy)).toBe(false);
    expect(isAllowedOrigin('garbage', '127.0.0.1:8080', policy)).toBe(false);
    expect(isAllowedOrigin('https://evil.example', '127.0.0.1:8080', { ...policy, cors: true })).toBe(true);
    expect(isAllowedOrigin('https://app.example.com', '127.0.0.1:8080', { ...policy, cors: false })).toBe(false);
  });
});
