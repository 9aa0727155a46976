//! The job's own barrier between steps, over TCP, hosted by rank 0.
//!
//! burn-collective 0.21's global orchestrator assumes every node has finished one registration
//! before any node registers again: a `finish` resets its count of global devices, and a node's
//! id is the number of nodes registered at the time. When one rank finishes step k and registers
//! step k + 1 before another rank's finish of step k has reached the orchestrator, the
//! orchestrator completes the new registration with the old node still counted (a stale address,
//! a duplicate node id, a wrong device count), and the job stalls in the next all-reduce or a
//! download of its tensors fails. Every rank therefore waits here after `finish_collective`
//! returned (the orchestrator acknowledged its finish) until all ranks have, and only then
//! registers the next step.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// How long rank 0 waits for every rank to connect, and a rank for rank 0 to listen: ranks start
/// at different times (a debug build on a loaded machine takes seconds to start).
const RENDEZVOUS: Duration = Duration::from_secs(120);

/// One side of the barrier: rank 0 holds a connection to every other rank, the others one to
/// rank 0.
pub enum StepBarrier {
    /// A job of one rank waits for no one.
    Alone,
    /// Rank 0: the other ranks' connections, in rank order.
    Host(Vec<TcpStream>),
    /// Any other rank: its connection to rank 0.
    Member(TcpStream),
}

impl StepBarrier {
    /// Rank 0 listens on `port` and accepts the other `world_size - 1` ranks; the others connect
    /// to `host:port` (retrying until rank 0 listens). Each rank first sends its rank.
    pub fn join(rank: u32, world_size: u32, host: &str, port: u16) -> Result<Self, String> {
        if world_size <= 1 {
            return Ok(StepBarrier::Alone);
        }
        let deadline = Instant::now() + RENDEZVOUS;
        if rank == 0 {
            let listener = TcpListener::bind(("0.0.0.0", port))
                .map_err(|e| format!("step barrier: cannot listen on port {port}: {e}"))?;
            listener.set_nonblocking(true).map_err(|e| e.to_string())?;
            let mut members: Vec<Option<TcpStream>> = (1..world_size).map(|_| None).collect();
            while members.iter().any(Option::is_none) {
                match listener.accept() {
                    Ok((mut stream, _)) => {
                        stream.set_nonblocking(false).map_err(|e| e.to_string())?;
                        stream.set_nodelay(true).map_err(|e| e.to_string())?;
                        let mut buf = [0u8; 4];
                        stream
                            .read_exact(&mut buf)
                            .map_err(|e| format!("step barrier: a rank's hello: {e}"))?;
                        let r = u32::from_le_bytes(buf);
                        match members.get_mut((r as usize).wrapping_sub(1)) {
                            Some(slot @ None) => *slot = Some(stream),
                            _ => return Err(format!("step barrier: unexpected rank {r}")),
                        }
                    }
                    Err(_) if Instant::now() > deadline => {
                        let missing: Vec<usize> = (1..world_size as usize)
                            .filter(|r| members[r - 1].is_none())
                            .collect();
                        return Err(format!(
                            "step barrier: ranks {missing:?} did not connect in {RENDEZVOUS:?}"
                        ));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(20)),
                }
            }
            Ok(StepBarrier::Host(members.into_iter().flatten().collect()))
        } else {
            loop {
                match TcpStream::connect((host, port)) {
                    Ok(mut stream) => {
                        stream.set_nodelay(true).map_err(|e| e.to_string())?;
                        stream
                            .write_all(&rank.to_le_bytes())
                            .map_err(|e| format!("step barrier: hello to rank 0: {e}"))?;
                        return Ok(StepBarrier::Member(stream));
                    }
                    Err(e) if Instant::now() > deadline => {
                        return Err(format!(
                            "step barrier: rank 0 did not listen on {host}:{port} in \
                             {RENDEZVOUS:?}: {e}"
                        ));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(50)),
                }
            }
        }
    }

    /// Returns once every rank has called `wait` with the same `step`. A rank that exits or
    /// waits at another step is an error (never a silent desynchronisation).
    pub fn wait(&mut self, step: u64) -> Result<(), String> {
        match self {
            StepBarrier::Alone => Ok(()),
            StepBarrier::Host(members) => {
                for (i, stream) in members.iter_mut().enumerate() {
                    let mut buf = [0u8; 8];
                    stream
                        .read_exact(&mut buf)
                        .map_err(|e| format!("step barrier: rank {} left: {e}", i + 1))?;
                    let theirs = u64::from_le_bytes(buf);
                    if theirs != step {
                        return Err(format!(
                            "step barrier: rank {} at step {theirs}, rank 0 at step {step}",
                            i + 1
                        ));
                    }
                }
                for (i, stream) in members.iter_mut().enumerate() {
                    stream
                        .write_all(&[1])
                        .map_err(|e| format!("step barrier: rank {} left: {e}", i + 1))?;
                }
                Ok(())
            }
            StepBarrier::Member(stream) => {
                stream
                    .write_all(&step.to_le_bytes())
                    .map_err(|e| format!("step barrier: rank 0 left: {e}"))?;
                let mut go = [0u8; 1];
                stream
                    .read_exact(&mut go)
                    .map_err(|e| format!("step barrier: rank 0 left: {e}"))
            }
        }
    }
}
