// Package hashslot computes Redis Cluster's hash slot of a key, as Redis does: CRC-16/XMODEM
// of the key's hash tag (the part between the first '{' and the next '}', when not empty) or
// of the whole key, modulo 16384.
package hashslot

// Count is the number of hash slots of a Redis Cluster.
const Count = 16384

// Of returns key's hash slot.
func Of(key string) uint16 {
	for i := 0; i < len(key); i++ {
		if key[i] == '{' {
			for j := i + 1; j < len(key); j++ {
				if key[j] == '}' {
					if j > i+1 {
						key = key[i+1 : j]
					}
					return crc16(key) % Count
				}
			}
			break
		}
	}
	return crc16(key) % Count
}

// crc16 is CRC-16/XMODEM (polynomial 0x1021, initial value 0).
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for b := 0; b < 8; b++ {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}
