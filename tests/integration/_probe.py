# Frames for tests/integration/port_security_probe_test.ts: what a tenant with CAP_NET_RAW (or no
# privilege at all: a plain UDP socket) sends that the port guard lets through. Builds on _spoof.py.
#   python3 _probe.py IFNAME KIND ARGS...   one frame on a packet socket
#   python3 _probe.py udpsend KIND ARGS...  one datagram on a plain UDP socket
#   python3 _probe.py listen4 PORT | listen6 PORT   prints "SOURCE HEXPAYLOAD" per datagram
import os
import errno
import socket
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _spoof import eth, ip4, ip6, ipv4, ipv6, mac, udp4, udp6, csum  # noqa: E402


def bootreply(yiaddr):
    # op=2 (BOOTREPLY), htype 1, hlen 6; yiaddr; magic cookie; option 53 = 2 (DHCPOFFER);
    # option 3 (router) and 6 (DNS) naming the sender: a rogue server's offer.
    b = struct.pack("!BBBBIHH", 2, 1, 6, 0, 0x1234, 0, 0x8000)
    b += b"\0" * 4 + ip4(yiaddr) + b"\0" * 8 + b"\0" * 16 + b"\0" * 192
    b += b"\x63\x82\x53\x63" + b"\x35\x01\x02" + b"\x03\x04" + ip4("10.66.66.66") + b"\xff"
    return b


def frame(kind, a):
    if kind == "dhcp4from":  # SRCMAC DSTMAC SRC DST SPORT YIADDR: a DHCPOFFER to port 68
        return eth(a[1], a[0], 0x0800, udp4(a[2], a[3], int(a[4]), 68, bootreply(a[5])))
    if kind == "dhcp6from":  # SRCMAC DSTMAC SRC DST SPORT: a DHCPv6 ADVERTISE (2) to port 546
        msg = struct.pack("!I", (2 << 24) | 0x123456) + b"rogue-dhcpv6"
        return eth(a[1], a[0], 0x86DD, udp6(a[2], a[3], int(a[4]), 546, msg))
    if kind == "rafrag":  # SRCMAC SRC PREFIX: an RA whose ICMPv6 header is in the 2nd fragment
        # The ICMPv6 RA (with checksum over the whole upper-layer payload).
        body = struct.pack("!BBHBBHII", 134, 0, 0, 64, 0, 1800, 0, 0)
        body += struct.pack("!BB", 1, 1) + mac(a[0])
        body += struct.pack("!BBBBIII", 3, 4, 64, 0xC0, 86400, 14400, 0) + ip6(a[2])
        src, dst = a[1], "ff02::1"
        pseudo = ip6(src) + ip6(dst) + struct.pack("!I", len(body)) + b"\0\0\0\x3a"
        body = body[:2] + struct.pack("!H", csum(pseudo + body)) + body[4:]
        # Destination options header (PadN, 48 bytes) then ICMPv6: the fragmentable part.
        dopt = struct.pack("!BB", 58, 5) + b"\x01\x2c" + b"\0" * 44
        part = dopt + body
        ident = 0x0BADF00D
        f1 = struct.pack("!BBHI", 60, 0, (0 << 3) | 1, ident) + part[:48]
        f2 = struct.pack("!BBHI", 60, 0, (48 // 8) << 3, ident) + part[48:]
        out = []
        for f in (f1, f2):
            out.append(eth("33:33:00:00:00:01", a[0], 0x86DD, ipv6(src, dst, 44, f)))
        return out
    raise SystemExit("unknown kind " + kind)


def vxlan_payload(a):
    # VNI INNERDSTMAC INNERSRCMAC INNERSRC INNERDST DPORT TEXT: a VXLAN-encapsulated datagram
    vni, dmac, smac, src, dst, dport, text = a
    inner = eth(dmac, smac, 0x0800, udp4(src, dst, 40000, int(dport), text.encode()))
    return struct.pack("!II", 0x08000000, int(vni) << 8) + inner


def listen(family, port):
    s = socket.socket(family, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if family == socket.AF_INET:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
        s.bind(("0.0.0.0", port))
    else:
        s.bind(("::", port))
    print("listening", flush=True)
    while True:
        data, addr = s.recvfrom(4096)
        print(addr[0], data.hex(), flush=True)


def sniff(ifname, srcmac):
    # Every IPv6 frame from SRCMAC arriving on IFNAME: "ipv6 NEXTHEADER LENGTH".
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0003))
    s.bind((ifname, 0))
    print("listening", flush=True)
    while True:
        f = s.recv(65535)
        if f[6:12] == mac(srcmac) and f[12:14] == b"\x86\xdd":
            print("ipv6", f[20], len(f), flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "sniff":
        sniff(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "listen4":
        listen(socket.AF_INET, int(sys.argv[2]))
    elif sys.argv[1] == "listen6":
        listen(socket.AF_INET6, int(sys.argv[2]))
    elif sys.argv[1] == "udpsend" and sys.argv[2] == "vxlan":  # NODEIP PORT then vxlan_payload
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.sendto(vxlan_payload(sys.argv[5:]), (sys.argv[3], int(sys.argv[4])))
    else:
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
        s.bind((sys.argv[1], 0))
        f = frame(sys.argv[2], sys.argv[3:])
        for x in (f if isinstance(f, list) else [f]):
            try:
                s.send(x)
            except OSError as e:  # dropped on the way out (a guard on egress): not sent
                if e.errno != errno.ENOBUFS:
                    raise
