import GatewayHTTP
import GatewayIO

extension Connection {
    /// Writes a message head through the loop's scratch buffer (`writeThroughScratch`), or, for a
    /// head larger than that buffer, through a temporary one (`HeadWriter.appendHead`).
    func writeHead(_ write: (inout HeadWriter) -> Void) {
        let done = writeThroughScratch { raw in
            var w = HeadWriter(raw)
            write(&w)
            return w.overflowed ? nil : w.count
        }
        if !done { self.write { HeadWriter.appendHead(to: &$0, write) } }
    }
}
