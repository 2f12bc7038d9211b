import { isIP } from 'node:net';
import ipaddr from 'ipaddr.js';

/**
 * Which addresses a URL input may reach by default: public unicast only.
 * Everything else (loopback, private, link-local with the cloud metadata
 * service, carrier-grade NAT, unique-local, multicast, reserved,
 * documentation, unspecified) is refused, and IPv6 forms that carry an IPv4
 * address (mapped, compatible, NAT64, 6to4) are judged by that address.
 * Odd IPv4 spellings (decimal `2130706433`, hex `0x7f.1`, short `127.1`) need
 * no case of their own: WHATWG URL parsing already writes them as dotted
 * quads before anything here sees them.
 */
const NON_PUBLIC = [
  '0.0.0.0/8', // "this network", unspecified
  '10.0.0.0/8',
  '100.64.0.0/10', // carrier-grade NAT
  '127.0.0.0/8',
  '169.254.0.0/16', // link-local, cloud metadata at 169.254.169.254
  '172.16.0.0/12',
  '192.0.0.0/24', // IETF protocol assignments
  '192.0.2.0/24', // documentation
  '192.88.99.0/24', // 6to4 relay anycast
  '192.168.0.0/16',
  '198.18.0.0/15', // benchmarking
  '198.51.100.0/24',
  '203.0.113.0/24',
  '224.0.0.0/4', // multicast
  '240.0.0.0/4', // reserved, and 255.255.255.255
  '::/128', // unspecified
  '::1/128', // loopback
  '100::/64', // discard
  '2001:db8::/32', // documentation
  'fc00::/7', // unique-local
  'fe80::/10', // link-local
  'fec0::/10', // site-local (deprecated)
  'ff00::/8', // multicast
];

const LOOPBACK = ['127.0.0.0/8', '::1/128'];

type Address = ipaddr.IPv4 | ipaddr.IPv6;

/** A membership test for CIDR ranges of both families (ipaddr.js matches an address only against ranges of its own family). */
function rangeSet(cidrs: readonly string[]): (address: Address) => boolean {
  const v4: Array<[ipaddr.IPv4, number]> = [];
  const v6: Array<[ipaddr.IPv6, number]> = [];
  for (const cidr of cidrs) {
    const [base, bits] = ipaddr.parseCIDR(cidr);
    if (base instanceof ipaddr.IPv4) v4.push([base, bits]);
    else v6.push([base, bits]);
  }
  return (address) => (address instanceof ipaddr.IPv4 ? v4.some((range) => address.match(range)) : v6.some((range) => address.match(range)));
}

const isNonPublic = rangeSet(NON_PUBLIC);
const isLoopback = rangeSet(LOOPBACK);

/**
 * An IP address as Node reads it: a dotted quad or an IPv6 address, its zone
 * id (which no range depends on) dropped. Node's isIP decides what counts,
 * not ipaddr.js, which also reads octal, hex and one-number IPv4 spellings:
 * the address checked is the one a socket connects to. An IPv6 address is
 * first written in the URL standard's canonical form, since ipaddr.js 1.x
 * cannot read a dotted tail after '::' (whitequark/ipaddr.js#101), which is
 * how getaddrinfo prints an IPv4-compatible address ('::127.0.0.1'), and
 * 2.x reads that form as a mapped address.
 */
function parseAddress(text: string): Address | undefined {
  const family = isIP(text);
  if (family === 4) return ipaddr.IPv4.parse(text);
  if (family !== 6) return undefined;
  return ipaddr.IPv6.parse(new URL(`http://[${text.replace(/%.*$/, '')}]/`).hostname.slice(1, -1));
}

const NAT64 = ipaddr.IPv6.parseCIDR('64:ff9b::/96');
const SIX_TO_FOUR = ipaddr.IPv6.parseCIDR('2002::/16');
const COMPATIBLE = ipaddr.IPv6.parseCIDR('::/96');
/** `::` and `::1`: in the compatible range, but IPv6's own unspecified and loopback addresses. */
const IPV6_OWN = ipaddr.IPv6.parseCIDR('::/127');

/** The IPv4 address inside an IPv6 address of one of the embedding forms. */
function embedded(address: ipaddr.IPv6): ipaddr.IPv4 | undefined {
  if (address.isIPv4MappedAddress()) return address.toIPv4Address(); // ::ffff:a.b.c.d
  const bytes = address.toByteArray();
  if (address.match(NAT64) || (address.match(COMPATIBLE) && !address.match(IPV6_OWN))) return new ipaddr.IPv4(bytes.slice(12)); // the last 32 bits
  if (address.match(SIX_TO_FOUR)) return new ipaddr.IPv4(bytes.slice(2, 6)); // the 32 bits after 2002:
  return undefined;
}

/** The address a range check judges: the IPv4 address an IPv6 form carries, or the address itself. */
function judged(address: Address): Address {
  return (address instanceof ipaddr.IPv6 && embedded(address)) || address;
}

/** The IPv4 address an IPv6 address stands for, if it is one of the embedding forms. */
export function embeddedIpv4(address: string): string | undefined {
  const parsed = parseAddress(address);
  return parsed instanceof ipaddr.IPv6 ? embedded(parsed)?.toString() : undefined;
}

/** True for an address that only reaches this machine or a private network (see above). */
export function isNonPublicAddress(address: string): boolean {
  const parsed = parseAddress(address);
  if (!parsed) return true; // not an address at all: never treat as public
  return isNonPublic(judged(parsed));
}

/** True for loopback addresses and `localhost` (with or without IPv6 brackets). */
export function isLoopbackHost(host: string): boolean {
  const h = host.replace(/^\[|\]$/g, '').toLowerCase();
  if (h === 'localhost' || h.endsWith('.localhost')) return true;
  const parsed = parseAddress(h);
  return parsed !== undefined && isLoopback(judged(parsed));
}
