#pragma clang diagnostic ignored "-Wmissing-prototypes"

#include <metal_stdlib>
#include <simd/simd.h>

using namespace metal;

struct _4
{
    uint _m0;
    uint _m1;
    uint _m2;
    uint _m3;
    uint _m4;
    uint _m5;
    uint _m6;
    uint _m7;
    uint _m8;
};

struct _9
{
    float _m0[1];
};

struct _12
{
    float _m0[1];
};

struct _15
{
    _4 _m0;
};

static inline __attribute__((always_inline))
uint _17(uint _19, uint _20)
{
    return _19 % ((_20 == 0u) ? 1u : _20);
}

static inline __attribute__((always_inline))
uint _28(uint _29, uint _30)
{
    return _29 / ((_30 == 0u) ? 1u : _30);
}

kernel void main0(const device _9& _8 [[buffer(0)]], device _12& _11 [[buffer(1)]], const device _15& _14 [[buffer(2)]], uint3 gl_WorkGroupID [[threadgroup_position_in_grid]], uint3 gl_NumWorkGroups [[threadgroups_per_grid]], uint gl_LocalInvocationIndex [[thread_index_in_threadgroup]])
{
    uint _59 = (((gl_WorkGroupID.y * gl_NumWorkGroups.x) + gl_WorkGroupID.x) * 64u) + gl_LocalInvocationIndex;
    if (_59 >= _14._m0._m0)
    {
        return;
    }
    uint _68 = _17(_59, _14._m0._m1);
    uint _75 = _17(_28(_59, _14._m0._m1), _14._m0._m2);
    uint _81 = _28(_59, _14._m0._m1 * _14._m0._m2);
    _11._m0[((_14._m0._m6 + (_81 * _14._m0._m8)) + (_75 * _14._m0._m7)) + _68] = _8._m0[((_14._m0._m3 + (_81 * _14._m0._m5)) + (_75 * _14._m0._m4)) + _68];
}

