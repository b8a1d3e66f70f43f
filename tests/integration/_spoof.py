# What a tenant's container can send with CAP_NET_RAW alone: hand-made Ethernet frames on a
# packet socket (tests/integration/port_security_test.ts). One frame per invocation:
#   python3 _spoof.py IFNAME KIND ARGS...
# and `listen PORT` prints every UDP datagram to PORT as "SOURCE PAYLOAD" lines until killed;
# `sniff IFNAME PORT` every IPv4 UDP datagram to PORT that reaches IFNAME, as "DESTINATION PAYLOAD".
import errno
import os
import socket
import struct
import sys


def csum(b):
    if len(b) % 2:
        b += b"\0"
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    s = (s >> 16) + (s & 0xFFFF)
    s += s >> 16
    return (~s) & 0xFFFF


def mac(s):
    return bytes.fromhex(s.replace(":", ""))


def ip4(s):
    return socket.inet_pton(socket.AF_INET, s)


def ip6(s):
    return socket.inet_pton(socket.AF_INET6, s)


def eth(dst, src, etype, payload, vlan=None, tpid=0x8100):
    tag = struct.pack("!HH", tpid, vlan) if vlan is not None else b""
    return mac(dst) + mac(src) + tag + struct.pack("!H", etype) + payload


def ipv4(src, dst, proto, payload):
    h = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(payload), 0, 0, 64, proto, 0, ip4(src), ip4(dst))
    return h[:10] + struct.pack("!H", csum(h)) + h[12:] + payload


def udp4(src, dst, sport, dport, data):
    u = struct.pack("!HHHH", sport, dport, 8 + len(data), 0) + data
    c = csum(ip4(src) + ip4(dst) + struct.pack("!BBH", 0, 17, len(u)) + u) or 0xFFFF
    return ipv4(src, dst, 17, u[:6] + struct.pack("!H", c) + u[8:])


def icmp4(src, dst, body):
    return ipv4(src, dst, 1, body[:2] + struct.pack("!H", csum(body)) + body[4:])


def ipv6(src, dst, nh, payload):
    return struct.pack("!IHBB", 6 << 28, len(payload), nh, 255) + ip6(src) + ip6(dst) + payload


def udp6(src, dst, sport, dport, data):
    u = struct.pack("!HHHH", sport, dport, 8 + len(data), 0) + data
    pseudo = ip6(src) + ip6(dst) + struct.pack("!I", len(u)) + b"\0\0\0\x11"
    c = csum(pseudo + u) or 0xFFFF
    return ipv6(src, dst, 17, u[:6] + struct.pack("!H", c) + u[8:])


def icmp6(src, dst, body):
    pseudo = ip6(src) + ip6(dst) + struct.pack("!I", len(body)) + b"\0\0\0\x3a"
    c = csum(pseudo + body)
    return ipv6(src, dst, 58, body[:2] + struct.pack("!H", c) + body[4:])


def solicited(addr):
    b = ip6(addr)
    return "33:33:ff:%02x:%02x:%02x" % (b[13], b[14], b[15])


def frame(kind, a):
    if kind == "udp4":  # SRCMAC DSTMAC SRC DST DPORT PAYLOAD [SPORT]
        sport = int(a[6]) if len(a) > 6 else 40000
        return eth(a[1], a[0], 0x0800, udp4(a[2], a[3], sport, int(a[4]), a[5].encode()))
    if kind == "tcp4":  # SRCMAC DSTMAC SRC DST DPORT [VLAN [TPID]]: a SYN, tagged when VLAN is given
        t = struct.pack("!HHIIBBHHH", 40000, int(a[4]), 1, 0, 5 << 4, 0x02, 65535, 0, 0)
        c = csum(ip4(a[2]) + ip4(a[3]) + struct.pack("!BBH", 0, 6, len(t)) + t)
        vlan = int(a[5]) if len(a) > 5 else None
        tpid = int(a[6], 16) if len(a) > 6 else 0x8100
        ip = ipv4(a[2], a[3], 6, t[:16] + struct.pack("!H", c) + t[18:])
        return eth(a[1], a[0], 0x0800, ip, vlan=vlan, tpid=tpid)
    if kind == "tcp6":  # SRCMAC DSTMAC SRC DST DPORT: a SYN
        t = struct.pack("!HHIIBBHHH", 40000, int(a[4]), 1, 0, 5 << 4, 0x02, 65535, 0, 0)
        c = csum(ip6(a[2]) + ip6(a[3]) + struct.pack("!IxxxB", len(t), 6) + t)
        return eth(a[1], a[0], 0x86DD, ipv6(a[2], a[3], 6, t[:16] + struct.pack("!H", c) + t[18:]))
    if kind == "udp6":  # SRCMAC DSTMAC SRC DST DPORT PAYLOAD
        return eth(a[1], a[0], 0x86DD, udp6(a[2], a[3], 40000, int(a[4]), a[5].encode()))
    if kind == "vlan4":  # SRCMAC DSTMAC SRC DST DPORT PAYLOAD: priority-tagged (VLAN 0)
        return eth(a[1], a[0], 0x0800, udp4(a[2], a[3], 40000, int(a[4]), a[5].encode()), vlan=0)
    if kind == "arp":  # SRCMAC DSTMAC OP SENDERMAC SENDERIP TARGETMAC TARGETIP
        body = struct.pack("!HHBBH", 1, 0x0800, 6, 4, int(a[2]))
        body += mac(a[3]) + ip4(a[4]) + mac(a[5]) + ip4(a[6])
        return eth(a[1], a[0], 0x0806, body)
    if kind == "na":  # SRCMAC DSTMAC SRC DST TARGET: override, with the sender's MAC as target's
        body = struct.pack("!BBHI", 136, 0, 0, 0xA0000000) + ip6(a[4])
        body += struct.pack("!BB", 2, 1) + mac(a[0])
        return eth(a[1], a[0], 0x86DD, icmp6(a[2], a[3], body))
    if kind == "nd":  # TYPE SRCMAC DSTMAC SRC DST TARGET OPTIONS: a solicitation (135) or an
        # advertisement (136, override) whose options are given whole as hex (as a tenant writes them)
        flags = 0xA0000000 if a[0] == "136" else 0
        body = struct.pack("!BBHI", int(a[0]), 0, 0, flags) + ip6(a[5]) + bytes.fromhex(a[6])
        return eth(a[2], a[1], 0x86DD, icmp6(a[3], a[4], body))
    if kind == "ndfrag":  # SRCMAC DSTMAC SRC DST TARGET LLAMAC: an advertisement (override) whose
        # Target Link-Layer Address option travels in a second IPv6 fragment (two frames)
        body = struct.pack("!BBHI", 136, 0, 0, 0xA0000000) + ip6(a[4]) + struct.pack("!BB", 2, 1) + mac(a[5])
        whole = icmp6(a[2], a[3], body)[40:]
        def frag(offset, more, data):
            h = struct.pack("!BBHI", 58, 0, (offset << 3) | more, 0x4A3B2C1D)
            return eth(a[1], a[0], 0x86DD, ipv6(a[2], a[3], 44, h + data))
        return [frag(0, 1, whole[:24]), frag(3, 0, whole[24:])]
    if kind == "rs":  # SRCMAC SRC OPTIONS: a router solicitation to all routers, options as hex
        body = struct.pack("!BBHI", 133, 0, 0, 0) + bytes.fromhex(a[2])
        return eth("33:33:00:00:00:02", a[0], 0x86DD, icmp6(a[1], "ff02::2", body))
    if kind == "ra":  # SRCMAC SRC PREFIX(/64): default router, autonomous prefix
        body = struct.pack("!BBHBBHII", 134, 0, 0, 64, 0, 1800, 0, 0)
        body += struct.pack("!BB", 1, 1) + mac(a[0])
        body += struct.pack("!BBBBIII", 3, 4, 64, 0xC0, 86400, 14400, 0) + ip6(a[2])
        return eth("33:33:00:00:00:01", a[0], 0x86DD, icmp6(a[1], "ff02::1", body))
    if kind == "redirect4":  # SRCMAC DSTMAC SRC DST GATEWAY ABOUT
        inner = ipv4(a[3], a[5], 17, struct.pack("!HHHH", 40000, 53, 8, 0))
        body = struct.pack("!BBH", 5, 1, 0) + ip4(a[4]) + inner[:28]
        return eth(a[1], a[0], 0x0800, icmp4(a[2], a[3], body))
    if kind == "redirect6":  # SRCMAC DSTMAC SRC DST TARGET ABOUT
        body = struct.pack("!BBHI", 137, 0, 0, 0) + ip6(a[4]) + ip6(a[5])
        return eth(a[1], a[0], 0x86DD, icmp6(a[2], a[3], body))
    if kind == "dhcp4":  # SRCMAC SRC: a DHCP server's offer, broadcast
        payload = struct.pack("!BBBB", 2, 1, 6, 0) + b"\0" * 232 + b"\x63\x82\x53\x63\x35\x01\x02\xff"
        u = udp4(a[1], "255.255.255.255", 67, 68, payload)
        return eth("ff:ff:ff:ff:ff:ff", a[0], 0x0800, u)
    if kind == "ns6":  # SRCMAC SRC TARGET: a neighbour solicitation (duplicate address detection from ::)
        body = struct.pack("!BBHI", 135, 0, 0, 0) + ip6(a[2])
        dst = "ff02::1:ff" + ip6(a[2]).hex()[26:28] + ":" + ip6(a[2]).hex()[28:32]
        return eth(solicited(a[2]), a[0], 0x86DD, icmp6(a[1], dst, body))
    if kind == "raw":  # SRCMAC DSTMAC ETHERTYPE(hex; below 0600 an 802.3 length) [PAYLOAD(hex)] [COUNT]
        payload = bytes.fromhex(a[3]) if len(a) > 3 else b""
        one = eth(a[1], a[0], int(a[2], 16), payload.ljust(46, b"\0"))
        return [one] * (int(a[4]) if len(a) > 4 else 1)
    if kind == "randsrc":  # DSTMAC ETHERTYPE(hex) COUNT: each frame from a random unicast MAC
        out = []
        for _ in range(int(a[2])):
            src = bytearray(os.urandom(6))
            src[0] = (src[0] & 0xFC) | 0x02
            out.append(eth(a[0], bytes(src).hex(":"), int(a[1], 16), b"\0" * 46))
        return out
    raise SystemExit("unknown kind " + kind)


def listen(port):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("0.0.0.0", port))
    print("listening", flush=True)
    while True:
        data, (src, _) = s.recvfrom(2048)
        print(src, data.decode(errors="replace"), flush=True)


def sniff(ifname, port):
    """Every IPv4 UDP datagram to PORT that reaches IFNAME (to this host or not), as "DST PAYLOAD"."""
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0003))
    s.bind((ifname, 0))
    print("listening", flush=True)
    while True:
        f, addr = s.recvfrom(4096)
        if addr[2] == socket.PACKET_OUTGOING or len(f) < 42 or f[12:14] != b"\x08\x00" or f[23] != 17:
            continue
        ihl = (f[14] & 0x0F) * 4
        if struct.unpack("!H", f[14 + ihl + 2 : 14 + ihl + 4])[0] != port:
            continue
        print(socket.inet_ntoa(f[30:34]), f[14 + ihl + 8 :].decode(errors="replace"), flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "listen":
        listen(int(sys.argv[2]))
    elif sys.argv[1] == "sniff":
        sniff(sys.argv[2], int(sys.argv[3]))
    else:
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
        s.bind((sys.argv[1], 0))
        try:
            f = frame(sys.argv[2], sys.argv[3:])
            for one in f if isinstance(f, list) else [f]:
                s.send(one)
        except OSError as e:  # dropped on the way out (a guard on egress): not sent
            if e.errno != errno.ENOBUFS:
                raise
