// @rnn: Reverie in upstream MLIR (func, arith, math, memref, scf, linalg).
func.func @rnn(%xs: memref<?x?xf32, strided<[?, ?], offset: ?>>, %w: memref<?x?xf32, strided<[?, ?], offset: ?>>, %result0: memref<?xf32>, %result1: memref<f32>, %status: memref<4xi64>) attributes {llvm.emit_c_interface} {
  %c0 = arith.constant 0 : index
  %0 = memref.dim %xs, %c0 : memref<?x?xf32, strided<[?, ?], offset: ?>>
  %T = arith.index_cast %0 : index to i64
  %c1 = arith.constant 1 : index
  %1 = memref.dim %xs, %c1 : memref<?x?xf32, strided<[?, ?], offset: ?>>
  %H = arith.index_cast %1 : index to i64
  %c0_i64 = arith.constant 0 : i64
  %3 = arith.index_cast %T : i64 to index
  %4 = arith.maxsi %3, %c0 : index
  %true = arith.constant true
  %9 = arith.index_cast %H : i64 to index
  %10 = arith.maxsi %9, %c0 : index
  %cst_f32_4 = arith.constant 0x00000000 : f32
  %c1_i64 = arith.constant 1 : i64
  %cst_f64_6 = arith.constant 0x0000000000000000 : f64
  %2 = arith.index_cast %c0_i64 : i64 to index loc("loop.rv":3:16)
  %5 = arith.cmpi sge, %2, %c0 : index loc("loop.rv":3:16)
  %6 = arith.cmpi slt, %2, %4 : index loc("loop.rv":3:16)
  %7 = arith.andi %5, %6 : i1 loc("loop.rv":3:16)
  %8 = arith.xori %7, %true : i1 loc("loop.rv":3:16)
  scf.if %8 {
    func.call @reverie_fail(%status, %c0_i64, %T, %c0_i64) : (memref<4xi64>, i64, i64, i64) -> () loc("loop.rv":3:16)
  } loc("loop.rv":3:16)
  %11 = memref.alloc(%10) : memref<?xf32> loc("loop.rv":3:16)
  linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]} outs(%11 : memref<?xf32>) {
  ^bb0(%12: f32):
    %13 = linalg.index 0 : index loc("loop.rv":3:16)
    %14 = scf.if %7 -> (f32) {
      %15 = memref.load %xs[%2, %13] : memref<?x?xf32, strided<[?, ?], offset: ?>> loc("loop.rv":3:16)
      scf.yield %15 : f32
    } else {
      scf.yield %cst_f32_4 : f32
    } loc("loop.rv":3:16)
    linalg.yield %14 : f32
  } loc("loop.rv":3:16)
  %16 = memref.alloc(%10) : memref<?xf32> loc("loop.rv":5:5)
  linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]} ins(%11 : memref<?xf32>) outs(%16 : memref<?xf32>) {
  ^bb0(%17: f32, %18: f32):
    linalg.yield %17 : f32
  } loc("loop.rv":5:5)
  %19 = arith.index_cast %c1_i64 : i64 to index loc("loop.rv":5:5)
  %20 = arith.index_cast %T : i64 to index loc("loop.rv":5:5)
  %23 = scf.for %21 = %19 to %20 step %c1 iter_args(%22 = %cst_f32_4) -> (f32) {
    %24 = arith.index_cast %21 : index to i64 loc("loop.rv":5:5)
    %25 = memref.alloc(%c1, %10) : memref<?x?xf32> loc("loop.rv":6:18)
    linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} outs(%25 : memref<?x?xf32>) {
    ^bb0(%26: f32):
      %27 = linalg.index 0 : index loc("loop.rv":6:18)
      %28 = linalg.index 1 : index loc("loop.rv":6:18)
      %29 = arith.muli %27, %10 : index loc("loop.rv":6:18)
      %30 = arith.addi %29, %28 : index loc("loop.rv":6:18)
      %31 = memref.load %16[%30] : memref<?xf32> loc("loop.rv":6:18)
      linalg.yield %31 : f32
    } loc("loop.rv":6:18)
    %32 = memref.alloc(%c1, %10) : memref<?x?xf32> loc("loop.rv":6:18)
    linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} outs(%32 : memref<?x?xf32>) {
    ^bb0(%33: f32):
      %34 = linalg.index 0 : index loc("loop.rv":6:18)
      %35 = linalg.index 1 : index loc("loop.rv":6:18)
      %38 = scf.for %36 = %c0 to %10 step %c1 iter_args(%37 = %cst_f64_6) -> (f64) {
        %39 = memref.load %25[%34, %36] : memref<?x?xf32> loc("loop.rv":6:18)
        %40 = memref.load %w[%36, %35] : memref<?x?xf32, strided<[?, ?], offset: ?>> loc("loop.rv":6:18)
        %41 = arith.mulf %39, %40 : f32 loc("loop.rv":6:18)
        %42 = arith.extf %41 : f32 to f64 loc("loop.rv":6:18)
        %43 = arith.addf %37, %42 : f64 loc("loop.rv":6:18)
        scf.yield %43 : f64
      } loc("loop.rv":6:18)
      %44 = arith.truncf %38 : f64 to f32 loc("loop.rv":6:18)
      linalg.yield %44 : f32
    } loc("loop.rv":6:18)
    memref.dealloc %25 : memref<?x?xf32> loc("loop.rv":6:18)
    %45 = memref.alloc(%10) : memref<?xf32> loc("loop.rv":6:18)
    linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]} outs(%45 : memref<?xf32>) {
    ^bb0(%46: f32):
      %47 = linalg.index 0 : index loc("loop.rv":6:18)
      %48 = arith.remui %47, %10 : index loc("loop.rv":6:18)
      %49 = arith.divui %47, %10 : index loc("loop.rv":6:18)
      %50 = memref.load %32[%49, %48] : memref<?x?xf32> loc("loop.rv":6:18)
      linalg.yield %50 : f32
    } loc("loop.rv":6:18)
    memref.dealloc %32 : memref<?x?xf32> loc("loop.rv":6:18)
    %51 = arith.index_cast %24 : i64 to index loc("loop.rv":6:29)
    %52 = arith.cmpi sge, %51, %c0 : index loc("loop.rv":6:29)
    %53 = arith.cmpi slt, %51, %4 : index loc("loop.rv":6:29)
    %54 = arith.andi %52, %53 : i1 loc("loop.rv":6:29)
    %55 = arith.xori %54, %true : i1 loc("loop.rv":6:29)
    scf.if %55 {
      func.call @reverie_fail(%status, %24, %T, %c1_i64) : (memref<4xi64>, i64, i64, i64) -> () loc("loop.rv":6:29)
    } loc("loop.rv":6:29)
    %56 = memref.alloc(%10) : memref<?xf32> loc("loop.rv":6:29)
    linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]} outs(%56 : memref<?xf32>) {
    ^bb0(%57: f32):
      %58 = linalg.index 0 : index loc("loop.rv":6:29)
      %59 = scf.if %54 -> (f32) {
        %60 = memref.load %xs[%51, %58] : memref<?x?xf32, strided<[?, ?], offset: ?>> loc("loop.rv":6:29)
        scf.yield %60 : f32
      } else {
        scf.yield %cst_f32_4 : f32
      } loc("loop.rv":6:29)
      linalg.yield %59 : f32
    } loc("loop.rv":6:29)
    %61 = memref.alloc(%10) : memref<?xf32> loc("loop.rv":6:18)
    linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]} ins(%45, %56 : memref<?xf32>, memref<?xf32>) outs(%61 : memref<?xf32>) {
    ^bb0(%62: f32, %63: f32, %64: f32):
      %65 = arith.addf %62, %63 : f32 loc("loop.rv":6:18)
      linalg.yield %65 : f32
    } loc("loop.rv":6:18)
    memref.dealloc %45 : memref<?xf32> loc("loop.rv":6:18)
    memref.dealloc %56 : memref<?xf32> loc("loop.rv":6:18)
    %66 = memref.alloc(%10) : memref<?xf32> loc("loop.rv":6:13)
    linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]} ins(%61 : memref<?xf32>) outs(%66 : memref<?xf32>) {
    ^bb0(%67: f32, %68: f32):
      %69 = math.tanh %67 : f32 loc("loop.rv":6:13)
      linalg.yield %69 : f32
    } loc("loop.rv":6:13)
    memref.dealloc %61 : memref<?xf32> loc("loop.rv":6:13)
    %72 = scf.for %70 = %c0 to %10 step %c1 iter_args(%71 = %cst_f64_6) -> (f64) {
      %73 = memref.load %66[%70] : memref<?xf32> loc("loop.rv":7:25)
      %74 = arith.extf %73 : f32 to f64 loc("loop.rv":7:25)
      %75 = arith.addf %71, %74 : f64 loc("loop.rv":7:25)
      scf.yield %75 : f64
    } loc("loop.rv":7:25)
    %76 = arith.truncf %72 : f64 to f32 loc("loop.rv":7:25)
    %77 = arith.addf %22, %76 : f32 loc("loop.rv":7:17)
    linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]} ins(%66 : memref<?xf32>) outs(%16 : memref<?xf32>) {
    ^bb0(%78: f32, %79: f32):
      linalg.yield %78 : f32
    } loc("loop.rv":5:5)
    memref.dealloc %66 : memref<?xf32> loc("loop.rv":5:5)
    scf.yield %77 : f32
  } loc("loop.rv":5:5)
  memref.dealloc %11 : memref<?xf32> loc("loop.rv":5:5)
  linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]} ins(%16 : memref<?xf32>) outs(%result0 : memref<?xf32>) {
  ^bb0(%80: f32, %81: f32):
    linalg.yield %80 : f32
  } loc("loop.rv":2:1)
  memref.store %23, %result1[] : memref<f32> loc("loop.rv":2:1)
  memref.dealloc %16 : memref<?xf32> loc("loop.rv":2:1)
  return
} loc("loop.rv":2:1)

// Records the first run-time error of a call: {1, value, bound, site} in %status.
func.func private @reverie_fail(%status: memref<4xi64>, %value: i64, %bound: i64, %site: i64) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c3 = arith.constant 3 : index
  %zero = arith.constant 0 : i64
  %one = arith.constant 1 : i64
  %failed = memref.load %status[%c0] : memref<4xi64>
  %first = arith.cmpi eq, %failed, %zero : i64
  scf.if %first {
    memref.store %one, %status[%c0] : memref<4xi64>
    memref.store %value, %status[%c1] : memref<4xi64>
    memref.store %bound, %status[%c2] : memref<4xi64>
    memref.store %site, %status[%c3] : memref<4xi64>
  }
  return
}
